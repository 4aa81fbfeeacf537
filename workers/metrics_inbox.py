"""The metrics inbox: agents push MetricBatch JSON onto one Redis list on the broker; the panel worker
drains it. This is the separate, lossy, fast path DESIGN.md gives metrics.

Why not a Celery task per batch: at 1 Hz per node, Celery's per-message work in the panel worker (message
protocol, delivery, ack, prefetch bookkeeping) cost about 3 ms of CPU per batch, eight times the ingest
itself. Here an agent makes one round trip per batch (RPUSH + LTRIM), and the panel takes whatever queued
up with one blocking pop plus, a moment later, one LPOP of up to DRAIN_MAX, and ingests them together.

Lossy on purpose: the list keeps at most MAX_BACKLOG batches (the oldest go first), so a panel outage
cannot fill Redis, and the panel skips batches older than MAX_AGE_S — after an outage it wants the current
figures, not a backlog of old ones.
"""

import json
import time
from datetime import datetime

from workers.broker import broker_key, broker_redis
from workers.contracts import MetricBatch

INBOX = "metrics-inbox"
MAX_BACKLOG = 20_000  # ~2 KB each: 40 MB at most, ten minutes of 32 silent-panel nodes
MAX_AGE_S = 30
DRAIN_MAX = 500


def inbox_key() -> str:
    return broker_key(INBOX)


def push(batch: MetricBatch) -> None:
    """Queue one batch for the panel (one Redis round trip)."""
    pipe = broker_redis().pipeline(transaction=False)
    pipe.rpush(inbox_key(), batch.model_dump_json())
    pipe.ltrim(inbox_key(), -MAX_BACKLOG, -1)
    pipe.execute()


def take(wait_s: float, linger_s: float = 0.0) -> list[bytes]:
    """Batches queued so far, oldest first: waits up to wait_s for the first, then linger_s for company,
    then takes what else is there (at most DRAIN_MAX in all). [] when none came."""
    client = broker_redis()
    first = client.blpop([inbox_key()], timeout=wait_s)
    if first is None:
        return []
    if linger_s:
        time.sleep(linger_s)
    more = client.lpop(inbox_key(), DRAIN_MAX - 1) or []
    return [first[1], *more]


def is_stale(data: dict, now: datetime) -> bool:
    """True for a batch sent more than MAX_AGE_S before `now` (aware datetime)."""
    sent = data.get("sent_at")
    if not sent:
        return False
    try:
        sent_at = datetime.fromisoformat(sent)
    except (TypeError, ValueError):
        return False
    if sent_at.tzinfo is None:
        return False
    return (now - sent_at).total_seconds() > MAX_AGE_S


def decode(raw: bytes) -> dict | None:
    """The batch as a dict, or None for something that is not JSON (logged by the caller)."""
    try:
        data = json.loads(raw)
    except (UnicodeDecodeError, ValueError):
        return None
    return data if isinstance(data, dict) else None
