"""Numbered operation events, emitted by agent tasks and sent to the panel in batches."""

import threading
import time

from workers.celery_app import app
from workers.contracts import EventBatch, EventKind, OperationEventMessage, utcnow
from workers.i18n import with_texts
from workers.identity import seal_for_panel
from workers.spool import spool_for
from workers.task_names import INGEST_EVENTS
from workers.topology import ingest_queue, is_amqp, route


def publish(task_name: str, envelope: dict, *, producer=None) -> None:
    """Send a signed message to the panel's ingest queue, the one queue a node may write to. `producer`:
    a kombu Producer on the sender's own broker connection (workers.metrics_inbox.push says when)."""
    queue = ingest_queue(agent=is_amqp(app.conf.broker_url))
    app.send_task(task_name, args=[envelope], producer=producer, **route(queue))


def send_to_panel(task_name: str, payload: dict, *, signer: str | None = None, producer=None) -> None:
    """Send a message about node payload["node"] now, signed (workers.identity); raises if the broker
    does not take it. For what must not be lost, use send_spooled."""
    publish(task_name, seal_for_panel(task_name, payload["node"], payload, signer), producer=producer)


def send_spooled(task_name: str, payload: dict, *, signer: str | None = None) -> None:
    """Send a message that must reach the panel: what the broker does not take now waits in the agent's
    on-disk spool and goes out in order once it is back (workers.spool)."""
    spool_for(publish_unsealed).send(task_name, {"payload": payload, "signer": signer})


def publish_unsealed(task_name: str, message: dict) -> None:
    """Seal a spooled message when it leaves, not when it was spooled: its stamp then starts when the
    broker takes it, so an hour in the spool does not make it stale. A spool written by an older agent
    holds sealed envelopes: their body is sealed anew."""
    if "sig" in message:
        message = {"payload": message["body"], "signer": message.get("signer")}
    payload = message["payload"]
    publish(task_name, seal_for_panel(task_name, payload["node"], payload, message.get("signer")))


class EventEmitter:
    """Buffers events of one attempt and sends them in batches through the spool: a state or progress
    change at once (with what waited before it), log lines when `max_batch` gathered or `flush_interval`
    seconds after the last batch left. Progress is throttled where it is measured (a download reports
    twice a second, a copy once a percent), and a page's progress bar should not lag behind it. A timer sends
    what waits even when no further event comes (a step that prints two lines and then works quietly);
    `flush_timer=False` leaves that to the next event and finish(), for a caller whose `send` must stay on
    its own thread. Each attempt numbers its events from 1.

    One second between batches: a fleet's streaming operations are the panel's most frequent ingest (each
    batch is a task, a transaction and a broadcast), and a log a second behind reads as live."""

    def __init__(
        self,
        operation_id: str,
        node: str,
        *,
        attempt: int = 1,
        signer: str | None = None,
        flush_interval: float = 1.0,
        max_batch: int = 100,
        send=send_spooled,
        flush_timer: bool = True,
    ):
        self.operation_id = operation_id
        self.node = node
        self.attempt = attempt
        self.signer = signer
        self.seq = 0
        self.flush_interval = flush_interval
        self.max_batch = max_batch
        self._send = send
        self._buffer: list[OperationEventMessage] = []
        self._last_flush = time.monotonic()
        self._flush_timer = flush_timer
        self._timer: threading.Timer | None = None
        self._lock = threading.Lock()
        self._send_lock = threading.Lock()

    def emit(self, kind: EventKind, **payload) -> int:
        with self._lock:
            self.seq += 1
            self._buffer.append(
                # Texts people read go with their msgid and params too, for the panel to translate.
                OperationEventMessage(seq=self.seq, time=utcnow(), kind=kind, payload=with_texts(payload))
            )
            # A state change leaves at once: the panel must learn that an attempt runs before the agent can
            # die with it, so a lost attempt is re-sent instead of waiting for the pickup deadline.
            due = (
                kind in ("state", "progress")
                or len(self._buffer) >= self.max_batch
                or time.monotonic() - self._last_flush >= self.flush_interval
            )
            if not due and self._flush_timer and self._timer is None:
                self._timer = self._start_timer()
        if due:
            self.flush()
        return self.seq

    def _start_timer(self) -> threading.Timer:
        wait = max(0.0, self.flush_interval - (time.monotonic() - self._last_flush))
        timer = threading.Timer(wait, self._flush_on_timer)
        timer.daemon = True
        timer.start()
        return timer

    def _flush_on_timer(self) -> None:
        with self._lock:
            self._timer = None
        self.flush()

    def log(self, line: str, stream: str = "stdout") -> int:
        return self.emit("log", line=line, stream=stream)

    def progress(self, percent: float, stage: str, **extra) -> int:
        return self.emit("progress", percent=round(percent, 1), stage=stage, **extra)

    def flush(self, *, final: bool = False) -> None:
        # One flush at a time, so batches leave in the order their events were numbered.
        with self._send_lock:
            with self._lock:
                events, self._buffer = self._buffer, []
                self._last_flush = time.monotonic()
                final_seq = self.seq if final else None
            if events or final:
                batch = EventBatch(
                    operation_id=self.operation_id,
                    node=self.node,
                    attempt=self.attempt,
                    events=events,
                    final_seq=final_seq,
                )
                self._send(INGEST_EVENTS, batch.model_dump(mode="json"), signer=self.signer)

    def finish(self, state: str, *, error: str = "", hint: str = "", result: dict | None = None) -> None:
        """The last event: the operation's terminal state. It carries the final sequence number."""
        self.emit("state", state=state, error=error, hint=hint, result=result or {})
        self.flush(final=True)
        with self._lock:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
