"""Cancel between steps: the panel sets a Redis key, the agent reads it before each step.

The key lives on the broker's Redis (the only thing an agent is sure to reach) under the same key prefix
as the broker's own keys, so test sessions sharing a Redis stay apart.
"""

import redis

from workers.celery_app import app, broker_url

CANCEL_TTL_S = 7 * 24 * 3600  # long enough for any install; short enough to clean itself up


def cancel_key(operation_id: str) -> str:
    prefix = (app.conf.broker_transport_options or {}).get("global_keyprefix", "")
    return f"{prefix}cancel:{operation_id}"


def _client() -> redis.Redis:
    return redis.Redis.from_url(app.conf.broker_url or broker_url())


def request_cancel(operation_id: str) -> None:
    with _client() as client:
        client.set(cancel_key(str(operation_id)), "1", ex=CANCEL_TTL_S)


def cancel_requested(operation_id: str) -> bool:
    with _client() as client:
        return bool(client.exists(cancel_key(str(operation_id))))
