from workers.sampler import set_interval
from workers.ssh_sampler import sample_and_send
from workers.task_names import AGENT_SAMPLE_SSH_NODE, AGENT_SET_METRICS_INTERVAL
from workers.tasks.base import agent_task


@agent_task(AGENT_SET_METRICS_INTERVAL)
def set_metrics_interval(seconds: float) -> float:
    """The panel changed this node's sampling interval; the running sampler picks it up on its next tick."""
    return set_interval(seconds)


# Lossy like every metric: a sample lost with a worker is replaced by the next one, never redone late.
@agent_task(AGENT_SAMPLE_SSH_NODE, acks_late=False)
def sample_ssh_node(target: dict) -> bool:
    """Sample an SSH node over SSH and send its MetricBatch (central agent, queue ssh-runner)."""
    return sample_and_send(target)
