"""The audit log's beat task (panel queue): pruning old entries once a day."""

from panel.audit.services import prune as prune_entries
from panel.core.infra.panel_tasks import panel_task


@panel_task("panel.audit.prune")
def prune() -> int:
    return prune_entries()
