"""Plain Redis access to the broker when it is make run's Redis, for the metrics inbox
(workers.metrics_inbox); on RabbitMQ, the fleet's broker, nothing uses this.

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
