"""Plain Redis access to the broker, for the few things agents and the panel share outside Celery messages
(cancel flags, the metrics inbox). The broker is the only service an agent is sure to reach.

Keys take the broker's own key prefix, so test sessions sharing a Redis stay apart."""

import threading

import redis

from workers.celery_app import app, broker_url

_clients: dict[str, redis.Redis] = {}
_lock = threading.Lock()


def broker_key(name: str) -> str:
    prefix = (app.conf.broker_transport_options or {}).get("global_keyprefix", "")
    return f"{prefix}{name}"


def broker_redis() -> redis.Redis:
    """One connection pool per process and broker URL (tests repoint the app at their own Redis)."""
    url = app.conf.broker_url or broker_url()
    client = _clients.get(url)
    if client is None:
        with _lock:
            client = _clients.setdefault(url, redis.Redis.from_url(url))
    return client
