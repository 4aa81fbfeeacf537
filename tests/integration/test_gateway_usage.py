"""Usage records: the Redis list drained into rows and hourly sums once each (a drain that dies before
trimming the list adds nothing twice), gone keys leave their rows, raw rows kept 30 days and sums a year."""

import asyncio
from datetime import timedelta

import pytest
from django.utils import timezone

from panel.accounts.models import ApiToken
from panel.gateway import store
from panel.gateway.access.identity import Caller
from panel.gateway.accounting import usage
from panel.gateway.models import UsageHour, UsageRecord
from tests.conftest import api_client_for

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def empty_list(_wired_to_redis):
    store.client().delete(store.USAGE_QUEUE, store.DRAIN_LOCK)


def record(token, request_id, when, status=200, prompt=10, completion=5, ttft=None) -> usage.Finished:
    return usage.Finished(
        request_id=request_id,
        time=when.isoformat(),
        token_id=token.pk,
        key=token.label,
        user_id=token.user_id,
        model="qwen",
        endpoint="chat/completions",
        stream=ttft is not None,
        status=status,
        error="" if status < 400 else "rate_limit_exceeded",
        prompt_tokens=prompt,
        completion_tokens=completion,
        ttft_ms=ttft,
        duration_ms=100.0,
        deployment_name="qwen-a",
        instance="qwen-a/0",
    )


def finish(token, records):
    caller = Caller.of(token)

    async def push():
        for one in records:
            await usage.finish(store.aclient(), caller, one, None, 0)

    asyncio.run(push())


def test_a_drain_stores_rows_and_hourly_sums_once_even_when_the_list_is_read_again(bob):
    token, _raw = ApiToken.issue(bob, "app", scopes=["inference"])
    hour = timezone.now().replace(minute=5, second=0, microsecond=0)
    records = [
        record(token, "a", hour, ttft=40.0),
        record(token, "b", hour + timedelta(minutes=1), ttft=60.0),
        record(token, "c", hour + timedelta(minutes=2), status=429, prompt=0, completion=0),
    ]
    finish(token, records)
    assert usage.drain() == 3
    # A drain that died after its commit but before trimming the list finds the same records again.
    finish(token, records)
    assert usage.drain() == 3
    assert UsageRecord.objects.count() == 3
    summed = UsageHour.objects.get()
    assert (summed.hour, summed.key, summed.requests, summed.errors) == (
        hour.replace(minute=0),
        "bob/app",
        3,
        1,
    )
    assert (summed.prompt_tokens, summed.completion_tokens, summed.ttft_ms_sum, summed.ttft_count) == (
        20,
        10,
        100.0,
        2,
    )
    token.refresh_from_db()
    assert token.last_used == hour + timedelta(minutes=2)


def test_rows_outlive_their_key_and_the_old_ones_are_pruned(bob):
    token, _raw = ApiToken.issue(bob, "gone", scopes=["inference"])
    now = timezone.now()
    finish(token, [record(token, "old", now - timedelta(days=40)), record(token, "new", now)])
    token.delete()
    assert usage.drain() == 2
    assert set(UsageRecord.objects.values_list("token", "key")) == {(None, "bob/gone")}
    UsageHour.objects.create(hour=now - timedelta(days=400), key="bob/gone", model="qwen")
    assert usage.prune(now) == {"raw": 1, "hourly": 1}
    assert list(UsageRecord.objects.values_list("request_id", flat=True)) == ["new"]
    assert UsageHour.objects.count() == 2  # the hours of both rows stay


@pytest.mark.parametrize("url", ["/api/v1/usage/", "/api/v1/usage-hourly/", "/api/v1/audit/"])
def test_moments_with_any_iso_offset_filter_in_utc(url, alice):
    """PostgreSQL refuses offsets past ±15:59 that ISO 8601 allows: they are turned into UTC first."""
    client = api_client_for(alice)
    assert client.get(url, {"until": "3677-01-20T16:04:25-23:11"}).status_code == 200
    assert client.get(url, {"since": "2026-12-03T10:00:00+14:45"}).status_code == 200
    overflow = client.get(url, {"until": "9999-12-31T23:59:59-23:59"})
    assert overflow.status_code == 400
    assert "until" in overflow.json()["errors"]
