"""An attacker who can write to the panel's Redis plants a pickle under a DRF throttle key: with Django's
default RedisCache it ran inside the panel on the next API request. The panel's cache is JSON and must
refuse it as bad data, never unpickle it, and keep answering."""

import pickle
import uuid

import pytest
import redis
from rest_framework.test import APIClient

from panel.core.infra import refusals
from tests.conftest import api_client_for

pytestmark = [pytest.mark.django_db, pytest.mark.attacks_panel]


class _Payload:
    """What unpickling runs: it creates `marker` (a harmless stand-in for running a shell)."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (open, (str(self.marker), "w"))


@pytest.fixture
def redis_cache(settings, redis_url, test_prefix):
    prefix = f"{test_prefix}-cache-{uuid.uuid4().hex[:8]}"  # each test's own keys on the shared Redis
    settings.CACHES = {
        "default": {
            "BACKEND": "panel.core.infra.cache.JsonRedisCache",
            "LOCATION": redis_url,
            "KEY_PREFIX": prefix,
        }
    }
    settings.REDIS_URL = redis_url
    client = redis.Redis.from_url(redis_url)
    client.cache_prefix = prefix
    yield client
    client.close()


def _throttle_key(client, kind):
    (key,) = [key for key in client.keys(f"{client.cache_prefix}:*") if f"throttle_{kind}".encode() in key]
    return key


@pytest.mark.parametrize("kind", ["anon", "user"])
def test_a_pickle_planted_under_a_throttle_key_is_refused_and_never_run(
    kind, bob, settings, redis_cache, tmp_path
):
    settings.PANEL_API_THROTTLE_ANON = settings.PANEL_API_THROTTLE_USER = "100/min"
    api = api_client_for(bob) if kind == "user" else APIClient()
    expected = api.get("/api/v1/operations/").status_code  # 200, or 401 for the anonymous caller
    key = _throttle_key(redis_cache, kind)
    marker = tmp_path / "pwned"
    before = refusals.state_counts(redis_cache).get("cache", 0)

    redis_cache.set(key, pickle.dumps(_Payload(marker)))
    answer = api.get("/api/v1/operations/")

    assert answer.status_code == expected
    assert not marker.exists()
    assert not redis_cache.get(key).startswith(b"\x80")  # the throttle wrote its own JSON history anew
    assert refusals.state_counts(redis_cache)["cache"] == before + 1


def test_what_the_panel_caches_comes_back_as_it_went_in(redis_cache):
    from django.core.cache import cache

    cache.set("history", [1764800000.5, 1764800001.25])
    cache.set("claim", "in-progress")
    cache.set("count", 3)
    cache.incr("count")
    assert cache.get("history") == [1764800000.5, 1764800001.25]
    assert cache.get_many(["claim", "count"]) == {"claim": "in-progress", "count": 4}
    assert cache.add("claim", "other") is False


def test_sessions_are_kept_as_json():
    from django.conf import settings

    assert settings.SESSION_SERIALIZER == "django.contrib.sessions.serializers.JSONSerializer"
    assert "pickle" not in settings.SESSION_ENGINE
