"""The panel worker's metrics ingester: one thread that drains the metrics inbox (workers.metrics_inbox),
ingests each batch and records the agents' heartbeats that come the same way. It runs inside every panel
worker (a Celery bootstep), so `celery -A panel.celery worker -Q panel` is all a deployment runs; several
panel workers share the inbox, each line goes to one.

Each node's lines fail alone: a line past its sender's rate (panel.monitoring.metrics.rates), malformed, out
of its bounds (workers.contracts) or unsigned is dropped and counted with the drain's other refusals in one
go; when applying a drain's lines together fails, each node's are applied on their own, and only the node
whose lines fail again loses them.
"""

import logging
import threading
import time
from datetime import datetime

from celery import bootsteps
from django.db import close_old_connections, connections
from pydantic import ValidationError

from panel.core.infra.refusals import refuse_tally
from panel.monitoring.metrics.rates import Buckets
from panel.monitoring.services import ingest_batches
from panel.nodes.agents.trust import refuse, trusted_heartbeats, trusted_metrics
from panel.nodes.services import record_drained_heartbeats
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
        self._buckets = Buckets()
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
        tally: dict[tuple[str, str], int] = {}
        example = ""
        for line in raws:
            sender = getattr(line, "user", None)
            try:  # parsed and validated in one step by pydantic's JSON reader
                signer, seal, raw = split_inbox_line(line)
                kind = inbox_kind(raw)
                if not self._buckets.take(sender, signer, kind):
                    key = (sender or signer[:64], "rate")
                    tally[key] = tally.get(key, 0) + 1
                    continue
                if kind == "heartbeat":
                    beats.append((signer, seal, raw, HeartbeatLine.model_validate_json(raw).heartbeat))
                    continue
                batch = MetricBatch.model_validate_json(raw)
            except (ValueError, ValidationError) as error:
                key = (sender or "?", "malformed")
                tally[key] = tally.get(key, 0) + 1
                example = example or f"malformed or unsigned inbox line: {str(error)[:200]}"
                continue
            parsed.append(batch)
            signed.append((signer, seal, raw, batch.node))
        refuse_tally("metrics", tally, example or "past the sender's rate")
        if signed:
            self._guarded(lambda: self._ingest_metrics(parsed, signed, now), len(signed), "metrics")
        if beats:
            self._guarded(lambda: record_heartbeats(beats), len(beats), "heartbeat")

    def _guarded(self, part, n: int, kind: str) -> None:
        """A part that fails as a whole (Redis or the database gone) is logged and dropped, and the thread
        goes on with the next drain: agents send again within seconds."""
        try:
            part()
        except Exception:
            log.exception("%d %s lines not applied", n, kind)
            self._connections_checked = float("-inf")  # the database connection may be what broke

    def _ingest_metrics(self, parsed: list[MetricBatch], signed: list[tuple], now: datetime) -> None:
        verdicts = trusted_metrics(signed)
        batches = [
            batch for batch, ok in zip(parsed, verdicts, strict=True) if ok and not is_stale(batch, now)
        ]
        if batches:
            each_node_alone(ingest_batches, batches, lambda batch: batch.node, "metrics")
            self.ingested += len(batches)


def each_node_alone(apply, items: list, node_of, kind: str) -> None:
    """apply(items) for the whole drain (items already verified: their nonces are spent); if that fails,
    apply each node's on their own, so a node's line that breaks applying (a bound the contracts missed, a
    row removed meanwhile) costs that node alone. Should every node's fail too (Redis or the database gone),
    the last error is raised."""
    try:
        apply(items)
        return
    except Exception:
        log.exception("%d %s lines of a drain failed together; applying each node's alone", len(items), kind)
    by_node: dict[str, list] = {}
    for item in items:
        by_node.setdefault(node_of(item), []).append(item)
    errors = []
    for node, own in by_node.items():
        try:
            apply(own)
        except Exception as error:
            errors.append(error)
            why = f"{len(own)} lines not applied: {error.__class__.__name__}: {error}"
            refuse(kind, node, why[:300], "unprocessable")
    if len(errors) == len(by_node):
        raise errors[-1]


def record_heartbeats(beats: list[tuple[str, str, bytes, Heartbeat]]) -> None:
    """Record the trusted ones of a drain's (signer, seal, JSON, heartbeat): one query for their nodes, one
    Redis round trip for their nonces, one UPDATE for the steady ones (panel.nodes.services), each node's
    alone should that fail."""
    about = [(signer, seal, raw, beat.node) for signer, seal, raw, beat in beats]
    verdicts, nodes = trusted_heartbeats(about)
    trusted = [
        (signer, beat, nodes[beat.node])
        for (signer, _seal, _raw, beat), ok in zip(beats, verdicts, strict=True)
        if ok
    ]
    each_node_alone(record_drained_heartbeats, trusted, lambda item: item[1].node, "heartbeat")


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
