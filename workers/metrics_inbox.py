"""The metrics inbox: agents send signed metric lines (workers.identity.inbox_line) to the panel; the panel
worker drains them in batches. This is the separate, lossy, fast path DESIGN.md gives metrics. Agents' own
heartbeats ride it too (push_heartbeat): as frequent, as replaceable by the next one, and at 512 nodes a
hundred Celery tasks a second less.

Why not a Celery task per batch: at 1 Hz per node, Celery's per-message work in the panel worker (message
protocol, delivery, ack, prefetch bookkeeping) cost about 3 ms of CPU per batch, eight times the ingest
itself. Here an agent makes one publish per batch, and the panel takes whatever queued up a few times a
second, blocking only while nothing comes.

Two transports behind the same three functions:
- RabbitMQ (the fleet): one raw publish to the ingest exchange with routing key `metrics` (the one exchange a
  node may write to), into the panel's metrics queue (workers.topology), consumed without acks.
- make run's embedded Redis: one Redis list (RPUSH + LTRIM), drained with LPOP / BLPOP.

Lossy on purpose: the inbox keeps at most MAX_BACKLOG batches (the oldest go first), so a panel outage
cannot fill the broker, and the panel skips batches older than MAX_AGE_S — after an outage it wants the
current figures, not a backlog of old ones (RabbitMQ also expires them: the queue's message TTL).
"""

import collections
import threading
import time

from workers.broker import broker_key, broker_redis
from workers.celery_app import app
from workers.contracts import Heartbeat, HeartbeatLine, MetricBatch
from workers.identity import inbox_line
from workers.topology import (
    INGEST_EXCHANGE,
    METRICS_MAX_AGE_S,
    METRICS_MAX_BACKLOG,
    METRICS_QUEUE,
    is_amqp,
    metrics_queue,
)

INBOX = "metrics-inbox"
MAX_BACKLOG = METRICS_MAX_BACKLOG
MAX_AGE_S = METRICS_MAX_AGE_S
DRAIN_MAX = 500
# How long taking what queued may wait on the AMQP socket for more, in all. A drain takes what has arrived:
# a budget per message let a steady stream (one every few ms at 512 nodes) keep a drain reading until
# DRAIN_MAX, two seconds of samples held back before any was ingested. Reading what already arrived is not
# bounded by it: on a busy machine that took longer than the budget, and what was left waited a drain.
TAKE_WAIT_S = 0.01


def inbox_key() -> str:
    return broker_key(INBOX)


def push(batch: MetricBatch, signer: str | None = None, *, producer=None) -> None:
    """Queue one batch for the panel (one round trip), signed by the node it is about or, for an SSH
    node's sample, by the central agent (workers.identity). On RabbitMQ `producer` is a kombu Producer on
    the sender's own connection (a process that speaks for several nodes, each with its broker user:
    bench/fleet_agents.py); an agent leaves it out and publishes through its app's pool."""
    push_line(inbox_line(signer or batch.node, batch.model_dump_json().encode()), producer=producer)


def push_heartbeat(beat: Heartbeat, *, producer=None) -> None:
    """Queue the agent's heartbeat for the panel, signed by its node. Lossy like a batch: a heartbeat is
    replaced by the next, and one older than workers.identity.VALIDITY_S["heartbeat"] counts for nothing."""
    raw = HeartbeatLine(heartbeat=beat).model_dump_json().encode()
    push_line(inbox_line(beat.node, raw, kind="heartbeat"), producer=producer)


def push_line(line: bytes, *, producer=None) -> None:
    """Queue one signed inbox line as it is (push and push_heartbeat make them)."""
    if producer is not None:
        _publish_line(producer, line)
        return
    if is_amqp(app.conf.broker_url):
        with app.producer_pool.acquire(block=True) as pooled:
            _publish_line(pooled, line)
        return
    pipe = broker_redis().pipeline(transaction=False)
    pipe.rpush(inbox_key(), line)
    pipe.ltrim(inbox_key(), -MAX_BACKLOG, -1)
    pipe.execute()


def _publish_line(producer, line: bytes) -> None:
    producer.publish(
        line,
        exchange=INGEST_EXCHANGE,
        routing_key=METRICS_QUEUE,
        serializer=None,
        content_type="application/octet-stream",
        content_encoding="binary",
        delivery_mode=1,  # transient: a lost sample is replaced by the next one
        retry=False,
    )


def wait_for_batch(wait_s: float) -> bytes | None:
    """The oldest batch, waiting up to wait_s for one to come (an idle panel blocks here)."""
    if is_amqp(app.conf.broker_url):
        return _amqp_reader().wait(wait_s)
    found = broker_redis().blpop([inbox_key()], timeout=wait_s)
    return None if found is None else found[1]


def take_queued(limit: int = DRAIN_MAX) -> list[bytes]:
    """Up to `limit` queued batches, oldest first, without waiting."""
    if is_amqp(app.conf.broker_url):
        return _amqp_reader().take(limit)
    return broker_redis().lpop(inbox_key(), limit) or []


class AmqpReader:
    """The panel's consumer of the metrics queue: the broker pushes lines (no acks: lossy by design) into a
    local buffer, read by one ingester thread. Without acks there is no prefetch window; the buffer holds at
    most what the queue held (its x-max-length), and a drain takes what arrived within one short wait."""

    def __init__(self):
        self._buffer: collections.deque[bytes] = collections.deque()
        self._connection = None

    def _connect(self):
        if self._connection is None:
            connection = app.connection_for_read()
            connection.ensure_connection(max_retries=1)
            consumer = connection.Consumer([metrics_queue()], on_message=self._on_message, no_ack=True)
            consumer.consume()
            self._connection = connection
        return self._connection

    def _on_message(self, message) -> None:
        self._buffer.append(message.body)

    def _pump(self, timeout: float) -> None:
        connection = self._connect()
        try:
            connection.drain_events(timeout=timeout)
        except TimeoutError:
            pass
        except Exception:
            self.close()  # the broker went away: the next call connects again
            raise

    def wait(self, wait_s: float) -> bytes | None:
        if not self._buffer:
            self._pump(wait_s)
        return self._buffer.popleft() if self._buffer else None

    def take(self, limit: int) -> list[bytes]:
        deadline = time.monotonic() + TAKE_WAIT_S
        while len(self._buffer) < limit:
            before = len(self._buffer)
            # Past the deadline the socket is only read, not waited on (timeout 0: what is there).
            self._pump(max(0.0, deadline - time.monotonic()))
            if len(self._buffer) == before:
                break
        return [self._buffer.popleft() for _ in range(min(limit, len(self._buffer)))]

    def close(self) -> None:
        if self._connection is not None:
            try:
                self._connection.release()
            finally:
                self._connection = None


_readers = threading.local()  # one consumer per ingester thread


def _amqp_reader() -> AmqpReader:
    reader = getattr(_readers, "reader", None)
    if reader is None:
        reader = _readers.reader = AmqpReader()
    return reader


def close_reader() -> None:
    """Close this thread's metrics consumer (the ingester, when it stops)."""
    reader = getattr(_readers, "reader", None)
    if reader is not None:
        reader.close()
        _readers.reader = None
