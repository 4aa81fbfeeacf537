"""Ask before running: before an operation's first step the agent asks the panel whether this delivery is
still wanted, so work the panel failed, cancelled or sent again since (an agent frozen past its deadline and
then resumed, a message held back and let go later) runs nothing.

The agent reaches the panel only through the broker: it sends a signed ask (ASK_STILL_WANTED) to the panel's
ingest, and the panel worker answers with a signed task on the node's own queue (AGENT_STILL_WANTED_ANSWER).
The agent runs its tasks in a thread pool, so the answer is handled by another thread while the asking one
waits here. No answer within ASK_TIMEOUT_S: ask again; none after ASK_TRIES: run nothing. The delivery is
then lost as far as the panel can tell, and its reaper re-sends the operation as a new attempt.
"""

import logging
import secrets
import threading
from typing import NamedTuple

from workers.events import send_to_panel
from workers.task_names import ASK_STILL_WANTED

log = logging.getLogger(__name__)

ASK_TIMEOUT_S = 10.0
ASK_TRIES = 3


class Verdict(NamedTuple):
    wanted: bool
    reason: str = ""
    ended: bool = False  # the operation ended on the panel: no later delivery of it may run either


class _Slot:
    def __init__(self, operation_id: str):
        self.operation_id = operation_id
        self.answered = threading.Event()
        self.verdict: Verdict | None = None


_waiting: dict[str, _Slot] = {}
_waiting_lock = threading.Lock()


def still_wanted(
    operation_id: str, node: str, dispatch: int | None, *, signer: str | None = None, timeout_s=ASK_TIMEOUT_S
) -> Verdict | None:
    """The panel's verdict on this delivery of the operation, or None when it did not answer in time."""
    ask = secrets.token_hex(12)
    slot = _Slot(operation_id)
    with _waiting_lock:
        _waiting[ask] = slot
    try:
        for attempt in range(1, ASK_TRIES + 1):
            question = {"node": node, "operation_id": operation_id, "dispatch": dispatch, "ask": ask}
            try:
                send_to_panel(ASK_STILL_WANTED, question, signer=signer)
            except Exception as error:  # the broker is away: wait as for an answer, then ask again
                log.warning("could not ask whether operation %s is still wanted: %s", operation_id, error)
            if slot.answered.wait(timeout_s):
                return slot.verdict
            log.warning(
                "the panel did not say within %.0f s whether operation %s is still wanted (ask %d of %d)",
                timeout_s,
                operation_id,
                attempt,
                ASK_TRIES,
            )
        return None
    finally:
        with _waiting_lock:
            _waiting.pop(ask, None)


def receive_answer(answer: dict) -> bool:
    """Hand the panel's (verified) answer to the thread that asked; False when nobody waits for it."""
    with _waiting_lock:
        slot = _waiting.get(str(answer.get("ask", "")))
    if slot is None or slot.operation_id != str(answer.get("operation_id", "")):
        log.info("answer to an ask nobody waits for (it timed out, or was answered already)")
        return False
    slot.verdict = Verdict(
        bool(answer.get("wanted")), str(answer.get("reason", "")), bool(answer.get("ended"))
    )
    slot.answered.set()
    return True
