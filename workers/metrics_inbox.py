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

Heartbeats travel apart from the metrics (a queue, or a Redis list, of their own) and every drain takes them
first: a node that floods the metrics path delays and drops metrics, never another node's liveness. On
RabbitMQ each line carries its publisher's broker user in `user_id`, which the broker checks against the
connection's user: the panel's per-sender limits (panel.monitoring.metrics.inbox) count lines against a sender
no node can spoof.

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
    HEARTBEAT_MAX_BACKLOG,
    HEARTBEAT_ROUTING_KEY,
    INGEST_EXCHANGE,
    METRICS_MAX_AGE_S,
    METRICS_MAX_BACKLOG,
    METRICS_QUEUE,
    heartbeat_queue,
    is_amqp,
    metrics_queue,
)

INBOX = "metrics-inbox"
HEARTBEAT_INBOX = "heartbeat-inbox"
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


def heartbeat_key() -> str:
    return broker_key(HEARTBEAT_INBOX)


class Line(bytes):
    """An inbox line as read, with the broker user that published it (RabbitMQ's checked `user_id`; None on
    Redis, which has no users)."""

    user: str | None = None


def _line(body: bytes, user: str | None) -> Line:
    line = Line(body)
    line.user = user
    return line


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
    push_line(inbox_line(beat.node, raw, kind="heartbeat"), producer=producer, heartbeat=True)


def push_line(line: bytes, *, producer=None, heartbeat: bool = False) -> None:
    """Queue one signed inbox line as it is (push and push_heartbeat make them)."""
    routing_key = HEARTBEAT_ROUTING_KEY if heartbeat else METRICS_QUEUE
    if producer is not None:
        publish_raw(producer, line, routing_key)
        return
    if is_amqp(app.conf.broker_url):
        with app.producer_pool.acquire(block=True) as pooled:
            publish_raw(pooled, line, routing_key)
        return
    key, backlog = (heartbeat_key(), HEARTBEAT_MAX_BACKLOG) if heartbeat else (inbox_key(), MAX_BACKLOG)
    pipe = broker_redis().pipeline(transaction=False)
    pipe.rpush(key, line)
    pipe.ltrim(key, -backlog, -1)
    pipe.execute()


def publish_raw(producer, line: bytes, routing_key: str = METRICS_QUEUE) -> None:
    """Publish one line to the ingest exchange on `producer`'s connection, naming its broker user (the
    broker refuses a `user_id` that is not the connection's own)."""
    producer.publish(
        line,
        exchange=INGEST_EXCHANGE,
        routing_key=routing_key,
        serializer=None,
        content_type="application/octet-stream",
        content_encoding="binary",
        delivery_mode=1,  # transient: a lost sample is replaced by the next one
        retry=False,
        user_id=producer.connection.userid,
    )


def wait_for_batch(wait_s: float) -> bytes | None:
    """The oldest batch, waiting up to wait_s for one to come (an idle panel blocks here)."""
    if is_amqp(app.conf.broker_url):
        return _amqp_reader().wait(wait_s)
    found = broker_redis().blpop([heartbeat_key(), inbox_key()], timeout=wait_s)  # heartbeats first
    if found is None:
        return None
    line = found[1]  # bytes: the broker's client does not decode
    return line if isinstance(line, bytes) else line.encode()


def take_queued(limit: int = DRAIN_MAX) -> list[bytes]:
    """Every queued heartbeat (up to `limit`), then up to `limit` queued batches, oldest first, without
    waiting."""
    if is_amqp(app.conf.broker_url):
        return _amqp_reader().take(limit)
    pipe = broker_redis().pipeline(transaction=False)
    pipe.lpop(heartbeat_key(), limit)
    pipe.lpop(inbox_key(), limit)
    beats, batches = pipe.execute()
    return (beats or []) + (batches or [])


class AmqpReader:
    """The panel's consumer of the metrics and heartbeat queues: the broker pushes lines (no acks: lossy by
    design) into local buffers, one per queue, read by one ingester thread. Without acks there is no prefetch
    window; a buffer holds at most what its queue held (its x-max-length), and a drain takes what arrived
    within one short wait, heartbeats first."""

    def __init__(self):
        self._buffer: collections.deque[bytes] = collections.deque()
        self._beats: collections.deque[bytes] = collections.deque()
        self._connection = None

    def _connect(self):
        if self._connection is None:
            connection = app.connection_for_read()
            connection.ensure_connection(max_retries=1)
            queues = [heartbeat_queue(), metrics_queue()]
            consumer = connection.Consumer(queues, on_message=self._on_message, no_ack=True)
            consumer.consume()
            self._connection = connection
        return self._connection

    def _on_message(self, message) -> None:
        beat = (getattr(message, "delivery_info", None) or {}).get("routing_key") == HEARTBEAT_ROUTING_KEY
        line = _line(message.body, (getattr(message, "properties", None) or {}).get("user_id"))
        (self._beats if beat else self._buffer).append(line)

    def _waiting(self) -> int:
        return len(self._buffer) + len(self._beats)

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
        if not self._waiting():
            self._pump(wait_s)
        for buffer in (self._beats, self._buffer):
            if buffer:
                return buffer.popleft()
        return None

    def take(self, limit: int) -> list[bytes]:
        deadline = time.monotonic() + TAKE_WAIT_S
        while len(self._buffer) < limit:
            before = self._waiting()
            # Past the deadline the socket is only read, not waited on (timeout 0: what is there).
            self._pump(max(0.0, deadline - time.monotonic()))
            if self._waiting() == before:
                break
        beats = [self._beats.popleft() for _ in range(min(limit, len(self._beats)))]
        return beats + [self._buffer.popleft() for _ in range(min(limit, len(self._buffer)))]

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
