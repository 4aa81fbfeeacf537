"""Agent task functions: thin wrappers that open an event emitter and call the host toolkit."""

import logging
import traceback

from workers.agent import AgentConfig
from workers.celery_app import app
from workers.events import EventEmitter
from workers.task_names import AGENT_INVENTORY

log = logging.getLogger(__name__)


def run_operation(operation_id: str, start_seq: int, body) -> None:
    """Run `body(emitter, config)` and always end the operation with a terminal state event."""
    config = AgentConfig.from_env()
    emitter = EventEmitter(operation_id, config.node_name, start_seq=start_seq)
    emitter.emit("state", state="running")
    try:
        result = body(emitter, config) or {}
    except Exception as exc:
        log.exception("operation %s failed", operation_id)
        hint = getattr(exc, "hint", "")
        for line in traceback.format_exc().splitlines()[-8:]:
            emitter.log(line, stream="stderr")
        emitter.finish("failed", error=str(exc) or type(exc).__name__, hint=hint)
        return
    emitter.finish("succeeded", result=result)


@app.task(name=AGENT_INVENTORY, bind=True)
def inventory(self, operation_id: str, start_seq: int = 0) -> None:
    from workers.inventory import collect_inventory

    run_operation(operation_id, start_seq, collect_inventory)
