"""The panel's own Redis (REDIS_URL): one connection pool per process and URL (tests point it at theirs)."""

import threading
from typing import cast

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


def hgetall(key: str) -> dict[str, str]:
    """A hash's fields and values: str, as decode_responses=True reads them (redis-py's types say bytes | str
    whatever the client decodes)."""
    return cast(dict[str, str], client().hgetall(key))


def texts(found: object) -> list[str]:
    """A list or set reply (smembers, zrangebyscore without scores) as the str members decode_responses
    gives; redis-py's types leave them bytes | str."""
    return list(cast("set[str] | list[str]", found))
