"""Ask before running: before an operation's first step the agent asks the panel whether this delivery is
still wanted, so work the panel failed, cancelled or sent again since (an agent frozen past its deadline and
then resumed, a message held back and let go later) runs nothing.

The agent reaches the panel only through the broker: it sends a signed ask (ASK_STILL_WANTED) to the panel's
ingest, and the panel worker answers with a signed task on the node's own queue (AGENT_STILL_WANTED_ANSWER).
The answer is handled where the agent's worker receives it, not in its thread pool (AnswersInline): every
pool thread may be waiting on an ask of its own (an agent frozen with several deliveries in hand, then
resumed), and an answer queued behind them would be read only after they had all timed out. No answer
within ASK_TIMEOUT_S: ask again; none after ASK_TRIES: run nothing. The delivery is then lost as far as the
panel can tell, and its reaper re-sends the operation as a new attempt.
"""

import logging
import secrets
import threading
from typing import NamedTuple

from celery import bootsteps

from workers.events import send_to_panel
from workers.task_names import AGENT_STILL_WANTED_ANSWER, ASK_STILL_WANTED

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


class AnswersInline(bootsteps.StartStopStep):
    """The agent worker's consumer runs the panel's answers (AGENT_STILL_WANTED_ANSWER) itself, as they
    arrive: verified like any task (workers.tasks.base.AgentTask, through Task.apply) and acknowledged, never
    queued for a pool thread. Handing one over is setting an event, so the consumer is not held up."""

    label = "answers inline"
    requires = ("celery.worker.consumer.tasks:Tasks",)

    def start(self, consumer):
        task = consumer.app.tasks.get(AGENT_STILL_WANTED_ANSWER)
        if task is not None:
            consumer.strategies[AGENT_STILL_WANTED_ANSWER] = answer_handler(task, consumer.connection_errors)


def answer_handler(task, connection_errors=()):
    """A Celery task strategy (message, body, ack, reject, callbacks) running `task` in the calling thread,
    the consumer's: the message is acknowledged there too, at once."""

    def handle(message, body, ack, reject, callbacks, **options):
        try:
            args, kwargs, _embed = body or message.decode()  # Celery's message protocol 2
            task.apply(args=args, kwargs=kwargs, task_id=(message.headers or {}).get("id"))
        except Exception:  # a malformed message must not stop the consumer
            log.exception("the panel's answer could not be handled")
        finally:
            message.ack_log_error(log, connection_errors)

    return handle
