from panel.gateway.usage import drain, prune
from workers.celery_app import app


@app.task(name="panel.gateway.drain_usage", ignore_result=True)
def drain_usage() -> int:
    """Finished gateway requests: from the Redis list into usage rows and hourly roll-ups."""
    return drain()


@app.task(name="panel.gateway.prune_usage")
def prune_usage() -> dict:
    return prune()
