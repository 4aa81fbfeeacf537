"""The panel's Django cache on Redis, serialized as JSON: nothing read back from Redis is ever unpickled.

Django's own RedisCache pickles every value that is not an int, so whoever can write into that Redis (a
stolen credential, a node that was once given the address) could run code in the panel by planting a
pickle under a key the panel reads, a DRF throttle's on the next anonymous request. Here values are JSON
(ints stay bare, so incr() keeps working); a value that is not JSON is bad data: it is refused, counted
(panel_rejected_state_total{kind="cache"}), logged, dropped from Redis and read as a miss.

What the panel caches must therefore be JSON: DRF's throttle histories (lists of floats) and the
Idempotency-Key claims (a string). Tuples come back as lists.
"""

import logging

import orjson
from django.core.cache.backends.redis import RedisCache, RedisCacheClient
from redis.exceptions import RedisError

from panel.core.infra import refusals

log = logging.getLogger(__name__)


class BadCacheData(ValueError):
    """A cached value that is not the JSON the panel writes."""


class JsonSerializer:
    """OPTIONS["serializer"] of Django's RedisCache: JSON out, JSON in, ints bare."""

    def dumps(self, obj):
        if type(obj) is int:  # not bool: incr() and decr() need the bare number
            return obj
        return orjson.dumps(obj)

    def loads(self, data):
        try:
            return int(data)
        except ValueError:
            pass
        try:
            return orjson.loads(data)
        except orjson.JSONDecodeError:
            raise BadCacheData("a cached value is not JSON") from None


class _RefusingClient(RedisCacheClient):
    def get(self, key, default):
        try:
            return super().get(key, default)
        except BadCacheData:
            self._refuse([key])
            return default

    def get_many(self, keys):
        client = self.get_client(None)
        found = {}
        bad = []
        for key, value in zip(keys, client.mget(keys), strict=True):
            if value is None:
                continue
            try:
                found[key] = self._serializer.loads(value)
            except BadCacheData:
                bad.append(key)
        if bad:
            self._refuse(bad)
        return found

    def _refuse(self, keys) -> None:
        log.warning(
            "refused %d cache value(s) that are not JSON (written by someone else): %s", len(keys), keys
        )
        try:
            client = self.get_client(None, write=True)
            client.delete(*keys)
            refusals.count_state(client, "cache", len(keys))
        except RedisError:
            log.warning("could not drop the refused cache values: Redis went away")


class JsonRedisCache(RedisCache):
    """Django's RedisCache with the JSON serializer, reading a value that is not JSON as a miss."""

    def __init__(self, server, params):
        options = params.setdefault("OPTIONS", {})
        options.setdefault("serializer", JsonSerializer)
        super().__init__(server, params)
        self._class = _RefusingClient
