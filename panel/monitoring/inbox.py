"""The panel worker's metrics ingester: one thread that drains the metrics inbox (workers.metrics_inbox),
ingests each batch and records the agents' heartbeats that come the same way. It runs inside every panel
worker (a Celery bootstep), so `celery -A panel.celery worker -Q panel` is all a deployment runs; several
panel workers share the inbox, each line goes to one.
"""

import logging
import threading
import time
from datetime import datetime

from celery import bootsteps
from django.db import close_old_connections, connections
from pydantic import ValidationError

from panel.monitoring.services import ingest_batches
from panel.nodes.services import record_drained_heartbeats
from panel.nodes.trust import refuse, trusted_heartbeats, trusted_metrics
from workers import metrics_inbox
from workers.contracts import Heartbeat, HeartbeatLine, MetricBatch, utcnow
from workers.identity import inbox_kind, split_inbox_line
from workers.task_names import PANEL_QUEUE

log = logging.getLogger(__name__)

WAIT_S = 1.0  # how long one blocking pop waits, so a stop request is seen within about this long
# While batches keep coming, drains start this far apart (after an idle spell, the first batch waits this
# long for company): one round trip and one publish to browsers per drain instead of per batch, for at most
# this much latency. A drain that took longer than this is followed by the next at once.
LINGER_S = 0.1
RETRY_S = 2.0  # pause after Redis failed, before trying again
# How often the thread lets Django drop a broken or aged database connection (Celery does it around every
# task; per drain it would reopen SQLite ten times a second for nothing). A failed ingest also does it.
CONNECTION_CHECK_S = 30.0


class MetricsIngester:
    """Drains the inbox until stopped, ingesting each drain's batches together. A malformed or stale batch
    is dropped alone."""

    def __init__(self):
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._connections_checked = float("-inf")
        self._drain_taken = float("-inf")  # monotonic time the last drain was taken
        self.ingested = 0

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="metrics-ingester", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def _run(self) -> None:
        try:
            self._drain_until_stopped()
        finally:
            metrics_inbox.close_reader()
            connections.close_all()  # this thread's own; left open, they outlive the thread

    def _drain_until_stopped(self) -> None:
        flowing = False
        while not self._stop.is_set():
            try:
                raws = self._next_drain(flowing)
            except Exception:  # the broker restarting or unreachable: the agents' batches wait in the inbox
                log.exception("metrics inbox unreachable; retrying in %s s", RETRY_S)
                self._stop.wait(RETRY_S)
                continue
            flowing = bool(raws)
            if raws:
                if time.monotonic() >= self._connections_checked + CONNECTION_CHECK_S:
                    close_old_connections()
                    self._connections_checked = time.monotonic()
                self.ingest_all(raws)

    def _next_drain(self, flowing: bool) -> list[bytes]:
        """What gathered in the inbox since the last drain: while batches keep coming, one take LINGER_S
        after the last one (at once if ingesting it took longer); while none do, a blocking pop for the
        first, then the linger for its company."""
        if not flowing:
            first = metrics_inbox.wait_for_batch(WAIT_S)
            if first is None:
                return []
            self._stop.wait(LINGER_S)
            self._drain_taken = time.monotonic()
            return [first, *metrics_inbox.take_queued(metrics_inbox.DRAIN_MAX - 1)]
        # The time the last drain's ingest took counts toward this one's linger: at 512 nodes a drain
        # takes tens of milliseconds, and a busy machine's slow one would otherwise add a full linger on top.
        self._stop.wait(max(0.0, self._drain_taken + LINGER_S - time.monotonic()))
        self._drain_taken = time.monotonic()
        return metrics_inbox.take_queued()

    def ingest_all(self, raws: list[bytes]) -> None:
        """Ingest a drain: its metrics first, so their frames reach browsers before the heartbeats' database
        writes; then its heartbeats. A part that fails (Redis or the database gone) is logged and dropped,
        and the thread goes on with the next drain: agents send again within seconds."""
        now = utcnow()
        parsed, signed, beats = [], [], []
        for line in raws:
            try:  # parsed and validated in one step by pydantic's JSON reader
                signer, seal, raw = split_inbox_line(line)
                if inbox_kind(raw) == "heartbeat":
                    beats.append((signer, seal, raw, HeartbeatLine.model_validate_json(raw).heartbeat))
                    continue
                batch = MetricBatch.model_validate_json(raw)
            except (ValueError, ValidationError) as error:
                why = f"malformed or unsigned inbox line: {str(error)[:200]}"
                refuse("metrics", "?", why, "malformed")
                continue
            parsed.append(batch)
            signed.append((signer, seal, raw, batch.node))
        if signed:
            self._ingest_metrics(parsed, signed, now)
        if beats:
            try:
                record_heartbeats(beats)
            except Exception:
                log.exception("%d heartbeats not recorded", len(beats))
                self._connections_checked = float("-inf")  # the database connection may be what broke

    def _ingest_metrics(self, parsed: list[MetricBatch], signed: list[tuple], now: datetime) -> None:
        try:
            verdicts = trusted_metrics(signed)
            batches = [
                batch for batch, ok in zip(parsed, verdicts, strict=True) if ok and not is_stale(batch, now)
            ]
            if batches:
                ingest_batches(batches)
                self.ingested += len(batches)
        except Exception:
            log.exception("%d metrics batches not ingested", len(signed))
            self._connections_checked = float("-inf")


def record_heartbeats(beats: list[tuple[str, str, bytes, Heartbeat]]) -> None:
    """Record the trusted ones of a drain's (signer, seal, JSON, heartbeat): one query for their nodes, one
    Redis round trip for their nonces, one UPDATE for the steady ones (panel.nodes.services)."""
    about = [(signer, seal, raw, beat.node) for signer, seal, raw, beat in beats]
    verdicts, nodes = trusted_heartbeats(about)
    trusted = [
        (signer, beat, nodes[beat.node])
        for (signer, _seal, _raw, beat), ok in zip(beats, verdicts, strict=True)
        if ok
    ]
    record_drained_heartbeats(trusted)


def is_stale(batch: MetricBatch, now: datetime) -> bool:
    """True for a batch sent more than MAX_AGE_S before `now` (aware): after an outage the panel wants the
    current figures, not the backlog."""
    sent_at = batch.sent_at
    if sent_at is None or sent_at.tzinfo is None:
        return False
    return (now - sent_at).total_seconds() > metrics_inbox.MAX_AGE_S


class MetricsIngestStep(bootsteps.StartStopStep):
    """Starts the ingester in workers that serve the panel queue (agents' workers share the Celery app)."""

    label = "metrics ingester"

    def create(self, worker):
        if PANEL_QUEUE in worker.app.amqp.queues.consume_from:
            return MetricsIngester()
        return None
