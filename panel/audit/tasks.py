"""The audit log's beat task (panel queue): pruning old entries once a day."""

from panel.audit.services import prune as prune_entries
from workers.celery_app import app


@app.task(name="panel.audit.prune")
def prune() -> int:
    return prune_entries()
