from panel.core.panel_tasks import panel_task
from panel.gateway.usage import drain, prune


@panel_task("panel.gateway.drain_usage", ignore_result=True)
def drain_usage() -> int:
    """Finished gateway requests: from the Redis list into usage rows and hourly roll-ups."""
    return drain()


@panel_task("panel.gateway.prune_usage")
def prune_usage() -> dict:
    return prune()
