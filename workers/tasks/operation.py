"""The frame every agent task runs in: an event emitter and a guaranteed terminal state."""

import logging
import traceback

from workers.agent import AgentConfig
from workers.events import EventEmitter

log = logging.getLogger(__name__)


class OperationCancelled(Exception):
    """Raised by a task body that stopped because the panel asked it to; ends the operation cancelled."""


def run_operation(operation_id: str, start_seq: int, body, target: dict | None = None) -> None:
    """Run `body(emitter, config)` and always end the operation with a terminal state event.

    An exception with a `hint` attribute (NpuSmiError, a failed step, ModelTaskError) is a foreseen
    failure: its message and hint go to the panel, no traceback.
    `target` is an SSH node's workers.remote.SshTarget, for tasks the central agent runs over SSH; then
    config.runner() reaches that node."""
    config = AgentConfig.for_target(target) if target else AgentConfig.from_env()
    emitter = EventEmitter(operation_id, config.node_name, start_seq=start_seq)
    emitter.emit("state", state="running")
    try:
        result = body(emitter, config) or {}
    except OperationCancelled as exc:
        emitter.finish("cancelled", error=str(exc), hint=getattr(exc, "hint", "") or "")
        return
    except Exception as exc:
        # A failure the task foresaw carries a hint (what to do) and says what happened; only an unforeseen
        # one puts its traceback into the operation's log, for whoever debugs the agent.
        foreseen = hasattr(exc, "hint")
        if foreseen:
            log.info("operation %s failed: %s", operation_id, exc)
        else:
            log.exception("operation %s failed", operation_id)
            for line in traceback.format_exc().splitlines()[-8:]:
                emitter.log(line, stream="stderr")
        emitter.finish("failed", error=str(exc) or type(exc).__name__, hint=getattr(exc, "hint", "") or "")
        return
    emitter.finish("succeeded", result=result)
