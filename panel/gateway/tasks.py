from panel.core.infra.panel_tasks import panel_task
from panel.gateway.accounting.usage import drain, prune
from panel.gateway.instances import failover


@panel_task("panel.gateway.drain_usage", ignore_result=True)
def drain_usage() -> int:
    """Finished gateway requests: from the Redis list into usage rows and hourly roll-ups."""
    return drain()


@panel_task("panel.gateway.prune_usage")
def prune_usage() -> dict:
    return prune()


@panel_task("panel.gateway.publish_excluded", ignore_result=True)
def publish_excluded() -> int:
    """The excluded instances written again (panel.gateway.instances.failover): the entry never outlives a
    change by more than this period, and a health change missed while Redis was away is caught up."""
    return len(failover.publish())
