"""The metrics inbox: agents push MetricBatch JSON onto one Redis list on the broker; the panel worker
drains it. This is the separate, lossy, fast path DESIGN.md gives metrics.

Why not a Celery task per batch: at 1 Hz per node, Celery's per-message work in the panel worker (message
protocol, delivery, ack, prefetch bookkeeping) cost about 3 ms of CPU per batch, eight times the ingest
itself. Here an agent makes one round trip per batch (RPUSH + LTRIM), and the panel takes whatever queued
up with one LPOP of up to DRAIN_MAX a few times a second, blocking on BLPOP only while nothing comes.

Lossy on purpose: the list keeps at most MAX_BACKLOG batches (the oldest go first), so a panel outage
cannot fill Redis, and the panel skips batches older than MAX_AGE_S — after an outage it wants the current
figures, not a backlog of old ones.
"""

from workers.broker import broker_key, broker_redis
from workers.contracts import MetricBatch
from workers.identity import metrics_line

INBOX = "metrics-inbox"
MAX_BACKLOG = 20_000  # ~2 KB each: 40 MB at most, ten minutes of 32 silent-panel nodes
MAX_AGE_S = 30
DRAIN_MAX = 500


def inbox_key() -> str:
    return broker_key(INBOX)


def push(batch: MetricBatch, signer: str | None = None) -> None:
    """Queue one batch for the panel (one Redis round trip), signed by the node it is about or, for an SSH
    node's sample, by the central agent (workers.identity)."""
    line = metrics_line(signer or batch.node, batch.model_dump_json().encode())
    pipe = broker_redis().pipeline(transaction=False)
    pipe.rpush(inbox_key(), line)
    pipe.ltrim(inbox_key(), -MAX_BACKLOG, -1)
    pipe.execute()


def wait_for_batch(wait_s: float) -> bytes | None:
    """The oldest batch, waiting up to wait_s for one to come (an idle panel blocks here)."""
    found = broker_redis().blpop([inbox_key()], timeout=wait_s)
    return None if found is None else found[1]


def take_queued(limit: int = DRAIN_MAX) -> list[bytes]:
    """Up to `limit` queued batches, oldest first, without waiting."""
    return broker_redis().lpop(inbox_key(), limit) or []
