"""Per-sender rate limits on the metrics inbox: what one node can cost the others is its own rate.

A token bucket per (broker user, signer, kind of line): heartbeats and metrics each have their own, so a
node's metrics flood never eats its heartbeats' tokens (and another node's are never touched). On RabbitMQ
the broker user is the `user_id` the broker checked against the publishing connection
(workers.metrics_inbox), so a node cannot spend another's tokens by naming it as signer; lines that carry no
user (make run's Redis) are counted by the signer they name. A line past its bucket is dropped before its
signature is checked or its JSON parsed, and counted (reason "rate").

The central agent speaks for every SSH node: its buckets are CENTRAL_FACTOR times larger.
"""

import time
from collections import OrderedDict

from django.conf import settings

from workers.identity import CENTRAL

CENTRAL_FACTOR = 64
MAX_BUCKETS = 20_000  # the least recently used go first: a sender naming endless signers grows nothing


class Buckets:
    def __init__(self):
        self._buckets: OrderedDict[tuple, list[float]] = OrderedDict()

    def take(self, user: str | None, signer: str, kind: str, now: float | None = None) -> bool:
        """Whether one more line of `kind` from (`user`, `signer`) fits its rate now."""
        now = time.monotonic() if now is None else now
        rate, burst = _limits(kind)
        if signer == CENTRAL:
            rate, burst = rate * CENTRAL_FACTOR, burst * CENTRAL_FACTOR
        key = (user, signer, kind)
        bucket = self._buckets.pop(key, None) or [burst, now]
        tokens = min(burst, bucket[0] + (now - bucket[1]) * rate)
        allowed = tokens >= 1
        self._buckets[key] = [tokens - 1 if allowed else tokens, now]
        if len(self._buckets) > MAX_BUCKETS:
            self._buckets.popitem(last=False)
        return allowed


def _limits(kind: str) -> tuple[float, float]:
    if kind == "heartbeat":
        return settings.PANEL_INGEST_HEARTBEATS_PER_S, settings.PANEL_INGEST_HEARTBEATS_PER_S * 5
    return settings.PANEL_INGEST_METRICS_PER_S, settings.PANEL_INGEST_METRICS_PER_S * 5
