"""Task names and queues: the only thing the panel and the agents share about Celery."""

PANEL_QUEUE = "panel"
# Served by the central agent (`python -m workers.agent --central`): tasks of SSH nodes.
SSH_RUNNER_QUEUE = "ssh-runner"

INGEST_EVENTS = "panel.ingest_events"
HEARTBEAT = "panel.heartbeat"
# Before an operation's first step the agent asks whether this delivery is still wanted (workers.asking);
# the panel answers with AGENT_STILL_WANTED_ANSWER on the node's queue.
ASK_STILL_WANTED = "panel.ask_still_wanted"
AGENT_STILL_WANTED_ANSWER = "agent.still_wanted_answer"

AGENT_INVENTORY = "agent.inventory"
AGENT_PREFLIGHT = "agent.preflight"
AGENT_INSTALL = "agent.install"
AGENT_SET_METRICS_INTERVAL = "agent.set_metrics_interval"
AGENT_INSTALL_AGENT = "agent.install_agent"
# The panel asks an agent to stop an operation between its steps (workers.cancellation).
AGENT_CANCEL_OPERATION = "agent.cancel_operation"
# One metrics sample (and liveness probe) of an SSH node, on the central agent's queue.
AGENT_SAMPLE_SSH_NODE = "agent.sample_ssh_node"

AGENT_LAUNCH_DEPLOYMENT = "agent.launch_deployment"
AGENT_STOP_DEPLOYMENT = "agent.stop_deployment"
AGENT_PROBE_DEPLOYMENTS = "agent.probe_deployments"
AGENT_BENCHMARK_DEPLOYMENT = "agent.benchmark_deployment"
INGEST_DEPLOYMENT_PROBE = "panel.ingest_deployment_probe"

AGENT_LIST_IMAGES = "agent.list_images"
AGENT_PULL_IMAGE = "agent.pull_image"
AGENT_LOAD_IMAGE = "agent.load_image"
AGENT_REMOVE_IMAGE = "agent.remove_image"

AGENT_INSPECT_MODEL = "agent.inspect_model"
AGENT_DOWNLOAD_MODEL = "agent.download_model"
AGENT_CONVERT_MODEL = "agent.convert_model"
AGENT_ATC_MODEL = "agent.atc_model"
AGENT_COPY_MODEL = "agent.copy_model"
AGENT_DELETE_MODEL = "agent.delete_model"

# The NPU network (HCCL fabric) of a node: its NICs, pings to the other nodes' NPUs and its HCCL interface.
AGENT_FABRIC_CHECK = "agent.fabric_check"
# A deployment's diagnostics bundle from one node (engine log, npu-smi, versions, env, kernel log, plog).
AGENT_COLLECT_DIAGNOSTICS = "agent.collect_diagnostics"

# What agents may send the panel, through the ingest exchange: the panel worker refuses any other task name
# arriving that way (panel.nodes.agents.ingest_guard), whatever its signature.
INGEST_TASKS = frozenset({INGEST_EVENTS, HEARTBEAT, INGEST_DEPLOYMENT_PROBE, ASK_STILL_WANTED})


def node_queue(node_name: str) -> str:
    return f"node.{node_name}"
