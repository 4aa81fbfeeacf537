"""The panel's own Redis (REDIS_URL): one connection pool per process and URL (tests point it at theirs)."""

import threading

import redis
from django.conf import settings

_clients: dict[str, redis.Redis] = {}
_clients_lock = threading.Lock()


def client() -> redis.Redis:
    url = settings.REDIS_URL
    found = _clients.get(url)
    if found is None:
        with _clients_lock:
            found = _clients.setdefault(url, redis.Redis.from_url(url, decode_responses=True))
    return found
