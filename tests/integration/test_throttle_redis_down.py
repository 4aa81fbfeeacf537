"""The API's rate limiter keeps its counts in Redis; while Redis restarts, requests pass unlimited instead
of failing with a 500 (the fault tier found GET /api/v1/operations/ failing after Redis was killed)."""

import pytest
from redis.exceptions import ConnectionError as RedisConnectionError

from tests.conftest import api_client_for

pytestmark = pytest.mark.django_db


def test_requests_pass_while_the_throttles_store_is_away(bob, settings, monkeypatch):
    from rest_framework.throttling import SimpleRateThrottle

    settings.PANEL_API_THROTTLE_USER = "5/min"

    def closed(*args, **kwargs):
        raise RedisConnectionError("Connection closed by server.")

    monkeypatch.setattr(SimpleRateThrottle.cache, "get", closed)
    answers = [api_client_for(bob).get("/api/v1/operations/").status_code for _ in range(7)]
    assert answers == [200] * 7
