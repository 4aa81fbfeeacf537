"""The gateway's shared state in a real Redis: least outstanding requests across instances (what several
web processes agree on), suspects avoided, forgotten counts, per-key limits per clock minute."""

import uuid

import pytest

from panel.gateway import store
from panel.gateway.access import limits
from panel.gateway.access.identity import Caller
from panel.gateway.instances import pool as pools

MINUTE_START = 1_800_000_000 - 1_800_000_000 % 60  # a whole minute, so the test never straddles two


@pytest.fixture
def redis(gateway_redis):
    return gateway_redis


def instances(*names):
    return [
        pools.Instance(f"{name}/0", i, name, f"http://127.0.0.1:{9000 + i}/v1", "")
        for i, name in enumerate(names)
    ]


def caller(**limit) -> Caller:
    return Caller(token_id=7, key="bob/app", user_id=1, allowed_models=(), **limit)


async def test_requests_go_to_the_instance_with_the_fewest_outstanding_and_leave_it_when_done(redis):
    a, b = instances("a", "b")
    picked = [await pools.acquire(redis(), [a, b], uuid.uuid4().hex) for _ in range(6)]
    assert sorted(i.id for i in picked) == ["a/0"] * 3 + ["b/0"] * 3
    assert (pools.outstanding("a/0"), pools.outstanding("b/0")) == (3, 3)
    async with redis().pipeline(transaction=False) as pipeline:
        pools.release(pipeline, a, "none")  # an unknown request id changes nothing
        await pipeline.execute()
    assert pools.outstanding("a/0") == 3


async def test_an_instance_that_just_failed_is_avoided_while_another_serves(redis):
    a, b = instances("a", "b")
    first = await pools.acquire(redis(), [a, b], "r1")
    await pools.failed(redis(), first, "r1")
    other = b if first is a else a
    assert {(await pools.acquire(redis(), [a, b], f"r{n}")).id for n in range(2, 6)} == {other.id}
    assert pools.outstanding(first.id) == 0


async def test_counts_of_a_web_process_that_died_are_forgotten_after_the_ttl(redis, settings):
    settings.PANEL_GATEWAY_INFLIGHT_TTL_S = 60
    (a,) = instances("a")
    store.client().zadd(store.inflight_key(a.id), {"lost": 1.0})  # started long ago, never ended
    assert pools.outstanding(a.id) == 0


async def test_a_key_over_its_requests_per_minute_is_refused_until_the_minute_turns(redis):
    key = caller(requests_per_minute=2, tokens_per_minute=None)
    now = MINUTE_START + 45
    assert [await limits.check(redis(), key, now) for _ in range(2)] == [None, None]
    over = await limits.check(redis(), key, now)
    assert (over.kind, over.retry_after) == ("requests", 15)
    assert await limits.check(redis(), key, MINUTE_START + 60) is None


async def test_a_key_over_its_tokens_per_minute_is_refused_from_its_next_request(redis):
    key = caller(requests_per_minute=None, tokens_per_minute=100)
    now = MINUTE_START + 10
    assert await limits.check(redis(), key, now) is None
    async with redis().pipeline(transaction=False) as pipeline:
        limits.spend(pipeline, key, 120, now)
        await pipeline.execute()
    over = await limits.check(redis(), key, now)
    assert (over.kind, over.retry_after) == ("tokens", 50)
    assert 0 < store.client().ttl(store.tokens_key(7, limits.minute(now))) <= limits.KEY_LIFETIME_S


async def test_a_key_without_limits_costs_no_round_trip(redis):
    assert await limits.check(redis(), caller(requests_per_minute=None, tokens_per_minute=None)) is None
    assert not list(store.client().scan_iter(f"{store.PREFIX}rpm:*"))
