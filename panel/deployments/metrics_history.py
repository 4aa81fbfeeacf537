"""The last hour of a deployment's engine metrics, so its page draws charts that do not start empty.

Kept in Redis beside the nodes' rings (panel.monitoring.metrics.store): a sorted set per deployment, score =
scrape time, member = the figures the charts draw. Old points are trimmed on every write and the key expires
an hour after the last one, so a deleted or stopped deployment leaves nothing behind. Nothing here touches the
database."""

import logging
from datetime import datetime

import orjson
import redis

from panel.core.infra.panel_redis import texts
from panel.monitoring.metrics import store

log = logging.getLogger(__name__)

WINDOW_S = 3600
MAX_POINTS = 600  # what the page charts hold: older points are thinned to this many when read
# The figures deployment.js charts and the autoscaler reads; the rest of a scrape (counters, histograms)
# stays out of Redis.
CHARTED = (
    "running",
    "waiting",
    "kv_cache_usage",
    "prompt_tokens_per_s",
    "generation_tokens_per_s",
    "window_ttft_p50",
    "window_ttft_p95",
    "window_ttft_p90",  # the autoscaler's TTFT figure (panel/deployments/autoscale)
    "window_tpot_p50",
    "window_tpot_p95",
    "ttft_p50",
    "ttft_p95",
    "tpot_p50",
    "tpot_p95",
    "prefix_cache_hit_rate",
    "window_prefix_cache_hit_rate",
)


def key(name: str) -> str:
    return f"{store.PREFIX}engine:{name}"


def record(name: str, metrics: dict, when: datetime) -> None:
    epoch = when.timestamp()
    figures = {field: metrics.get(field) for field in CHARTED if metrics.get(field) is not None}
    member = orjson.dumps({"t": round(epoch, 3), "m": figures})
    pipe = store.client().pipeline()
    pipe.zadd(key(name), {member: epoch})
    pipe.zremrangebyscore(key(name), "-inf", epoch - WINDOW_S)
    pipe.expire(key(name), WINDOW_S)
    try:
        pipe.execute()
    except redis.RedisError as error:  # the charts lose a point; the probe's states and logs must not
        log.warning("engine metrics of %s not kept for the charts: %s", name, error)


def read(name: str, now: datetime, since_s: float = WINDOW_S) -> list[dict]:
    """Points of the last `since_s` seconds, oldest first: {"time": epoch seconds, "metrics": {...}};
    thinned to at most MAX_POINTS, one per equal slice of the window (its newest)."""
    start = now.timestamp() - min(since_s, WINDOW_S)
    members = texts(store.client().zrangebyscore(key(name), start, "+inf"))
    points = [orjson.loads(member) for member in members]
    step = min(since_s, WINDOW_S) / MAX_POINTS
    kept: dict[int, dict] = {}
    for point in points:
        kept[int((point["t"] - start) // step)] = point
    return [{"time": point["t"], "metrics": point["m"]} for point in kept.values()]


def forget(name: str) -> None:
    store.client().delete(key(name))
