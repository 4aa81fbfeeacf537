"""The frame every agent task runs in: a lease on the host, the panel's word that this delivery is still
wanted (workers.asking), an event emitter, a sure terminal state."""

import logging
import traceback

from workers import asking
from workers.agent_config import AgentConfig
from workers.events import EventEmitter
from workers.i18n import message_of
from workers.identity import CENTRAL
from workers.leases import LeaseUnavailable, OperationLease
from workers.task_names import AGENT_STILL_WANTED_ANSWER
from workers.tasks.base import agent_task, current_delivery

log = logging.getLogger(__name__)


class OperationCancelled(Exception):
    """Raised by a task body that stopped because the panel asked it to; ends the operation cancelled."""


def run_operation(operation_id: str, start_seq: int, body, target: dict | None = None) -> None:
    """Run `body(emitter, config)` as a new attempt of the operation and always end it with a terminal state
    event. A delivery that finds the operation running in another attempt, or already ended, runs nothing.

    An exception with a `hint` attribute (NpuSmiError, a failed step, ModelTaskError) is a foreseen
    failure: its message and hint go to the panel, no traceback.
    `target` is an SSH node's workers.remote.SshTarget, for tasks the central agent runs over SSH; then
    config.runner() reaches that node. `start_seq` is accepted for messages sent by older panels: every
    attempt numbers its events from 1 now."""
    config = AgentConfig.for_target(target) if target else AgentConfig.from_env()
    lease = OperationLease(operation_id)
    try:
        attempt = lease.acquire()
    except LeaseUnavailable as why:
        log.info("delivery of operation %s not run: %s", operation_id, why)
        return
    try:
        emitter = EventEmitter(
            operation_id, config.node_name, attempt=attempt, signer=CENTRAL if target else None
        )
        # Said before the ask, and sent at once: an agent that dies while it waits for the answer leaves a
        # running operation its next heartbeat does not list, which the reaper sends again. Nothing has run
        # yet, and the panel ignores it for an operation that already ended.
        emitter.emit("state", state="running")
        emitter.flush()
        if not _still_wanted(lease, config, target):
            return
        if attempt > 1:
            emitter.log(
                f"attempt {attempt}: the task was delivered again after an earlier attempt ended early"
            )
        state = _run_body(emitter, config, body, operation_id)
        lease.finish(state)
    finally:
        lease.release()


def _still_wanted(lease: OperationLease, config: AgentConfig, target: dict | None) -> bool:
    """Ask the panel whether the delivery being run is still wanted. A body called outside a verified
    delivery (the task functions called directly, as unit tests do) has nobody to ask."""
    delivery = current_delivery.get()
    if delivery is None:
        return True
    signer = CENTRAL if target else None
    verdict = asking.still_wanted(lease.operation_id, config.node_name, delivery.dispatch, signer=signer)
    if verdict is None:
        log.warning("operation %s not run: the panel did not confirm it still wants it", lease.operation_id)
        return False
    if not verdict.wanted:
        log.warning("operation %s not run: %s", lease.operation_id, verdict.reason)
        if verdict.ended:
            lease.finish("ended on the panel")
        return False
    return True


@agent_task(AGENT_STILL_WANTED_ANSWER)
def still_wanted_answer(answer: dict, target: dict | None = None) -> None:
    """The panel's answer to an ask of workers.asking, for the thread waiting on it."""
    asking.receive_answer(answer)


def _why(exc: Exception) -> dict:
    """What a failed operation's result says: a permanent failure (the same attempt would fail the same
    way) and its code, so the panel does not retry it."""
    if not getattr(exc, "permanent", False):
        return {}
    return {"permanent": True, "code": getattr(exc, "code", ""), **(getattr(exc, "details", None) or {})}


def _run_body(emitter: EventEmitter, config: AgentConfig, body, operation_id: str) -> str:
    try:
        result = body(emitter, config) or {}
    except OperationCancelled as exc:
        emitter.finish("cancelled", error=message_of(exc), hint=getattr(exc, "hint", "") or "")
        return "cancelled"
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
        # message_of keeps the error's msgid and params, for the panel to show it translated.
        error, hint = message_of(exc) or type(exc).__name__, getattr(exc, "hint", "") or ""
        emitter.finish("failed", error=error, hint=hint, result=_why(exc))
        return "failed"
    emitter.finish("succeeded", result=result)
    return "succeeded"
