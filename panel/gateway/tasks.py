from panel.core.panel_tasks import panel_task


@panel_task("panel.gateway.drain_usage", ignore_result=True)
def drain_usage() -> int:
    """Finished gateway requests: from the Redis list into usage rows and hourly roll-ups."""
    from panel.gateway.usage import drain

    return drain()


@panel_task("panel.gateway.prune_usage")
def prune_usage() -> dict:
    from panel.gateway.usage import prune

    return prune()
