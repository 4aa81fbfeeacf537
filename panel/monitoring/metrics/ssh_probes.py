"""Liveness and metrics of SSH nodes: beat calls dispatch_ssh_probes every second, which sends each SSH node
whose metrics interval has passed one sample task for the central agent (workers.ssh_sampler).

The central agent sends what it read as an ordinary MetricBatch, which the panel takes as a heartbeat too;
a probe that fails sends nothing. So an SSH node goes offline and comes back through the same path as an
agent node (Node.effective_status, the offline sweeper, touch_heartbeat on ingest).

Its liveness interval is its metrics interval, but never shorter than the heartbeat interval: the panel
writes last_heartbeat of metrics-sending nodes in batches a few seconds apart, so three one-second intervals
would flap a healthy node offline."""

from django.conf import settings

from panel.core.domain.choices import NodeTransport
from panel.monitoring.metrics import store
from panel.monitoring.models import NodeSampling
from panel.nodes.agents.trust import send_agent_task
from panel.nodes.models import Node
from workers.task_names import AGENT_SAMPLE_SSH_NODE

DEFAULT_METRICS_INTERVAL_S = NodeSampling._meta.get_field("interval_s").default
BEAT_S = 1.0  # panel/celery.py runs dispatch_ssh_probes this often: the fastest an SSH node is sampled
# A node counts as due this much before its interval has passed, so beat's jitter does not skip a tick.
DUE_SLACK_S = BEAT_S / 2


def probed_nodes():
    """SSH nodes the panel may reach: the admin confirmed their host key."""
    return Node.objects.filter(transport=NodeTransport.SSH).exclude(ssh_host_key_fingerprint="")


def liveness_interval(metrics_interval_s: float) -> float:
    return max(metrics_interval_s, settings.PANEL_HEARTBEAT_INTERVAL)


def due_key(node_name: str) -> str:
    return f"{store.PREFIX}ssh-probe:{node_name}"


def dispatch_ssh_probes() -> list[str]:
    """Send a sample task for every probed SSH node whose metrics interval has passed; returns their names."""
    nodes = list(probed_nodes().select_related("sampling"))
    if not nodes:
        return []
    intervals = {}
    for node in nodes:
        sampling = getattr(node, "sampling", None)
        intervals[node.name] = sampling.interval_s if sampling else DEFAULT_METRICS_INTERVAL_S
        liveness = liveness_interval(intervals[node.name])
        if node.heartbeat_interval != liveness:  # the sweeper and effective_status read it from the row
            Node.objects.filter(pk=node.pk).update(heartbeat_interval=liveness)
    pipe = store.client().pipeline(transaction=False)
    for node in nodes:
        wait_ms = max(int((intervals[node.name] - DUE_SLACK_S) * 1000), 1)
        pipe.set(due_key(node.name), "1", nx=True, px=wait_ms)
    sent = []
    for node, due in zip(nodes, pipe.execute(), strict=True):
        if due:
            # A sample not taken within its interval is stale: the next one replaces it.
            send_agent_task(node, AGENT_SAMPLE_SSH_NODE, {}, expires=max(intervals[node.name], BEAT_S))
            sent.append(node.name)
    return sent
