"""Task names and queues: the only thing the panel and the agents share about Celery."""

PANEL_QUEUE = "panel"

INGEST_EVENTS = "panel.ingest_events"
INGEST_METRICS = "panel.ingest_metrics"
HEARTBEAT = "panel.heartbeat"

AGENT_INVENTORY = "agent.inventory"


def node_queue(node_name: str) -> str:
    return f"node.{node_name}"
