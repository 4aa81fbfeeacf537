"""Picks made ahead (panel.gateway.instances.ahead) in a real Redis: a request's instance is picked in the
round trip that reads its key and pool, by the pool its web process last read; it stands only for that same
pool, and is taken back otherwise (before the request picks again under the same id) or when the request
ends without it."""

import sys

import orjson
import pytest

from panel.gateway import store
from panel.gateway.access import identity
from panel.gateway.instances import ahead, routing
from panel.gateway.instances import pool as pools
from panel.gateway.proxy import pd
from panel.gateway.proxy.handler import Request, _plan_ahead


@pytest.fixture
def redis(gateway_redis):
    ahead.forget()
    yield gateway_redis
    ahead.forget()


def instance(name: str, role: str = "", port: int = 9000) -> pools.Instance:
    return pools.Instance(f"{name}/0", port, name, f"http://127.0.0.1:{port}/v1", "", role)


def pool_of(*instances, policy=routing.LEAST_OUTSTANDING, idle=False) -> pools.Pool:
    return pools.Pool("qwen", tuple(instances), policy, idle)


async def picked(redis, planned: ahead.Ahead) -> tuple:
    """What the planned picks answer when they run (in a request, with its key's read)."""
    async with redis.pipeline(transaction=False) as pipeline:
        for command in planned.commands():
            pipeline.eval(*command)
        return tuple(await pipeline.execute())


def no_prefill() -> str:
    raise AssertionError("a plain pool has no prefill to count")


async def test_a_pick_made_ahead_stands_for_the_pool_it_was_made_from(redis):
    a, b = instance("a", port=9001), instance("b", port=9002)
    pool = pool_of(a, b)
    assert ahead.plan("qwen", "r1", no_prefill) is None  # nothing read yet: the request picks itself
    ahead.remember("qwen", pool, {})
    planned = ahead.plan("qwen", "r1", no_prefill)
    pending = ahead.Pending(redis(), planned, await picked(redis(), planned))
    (chosen,) = await pending.claim(pool, [a, b])
    other = b if chosen is a else a
    assert (pools.outstanding(chosen.id), pools.outstanding(other.id)) == (1, 0)
    await pending.drop()  # claimed: nothing left to take back
    assert pools.outstanding(chosen.id) == 1


async def test_a_pick_made_by_a_pool_that_changed_is_taken_back_before_the_request_picks_again(redis):
    a, b = instance("a", port=9001), instance("b", port=9002)
    ahead.remember("qwen", pool_of(a, b), {})
    planned = ahead.plan("qwen", "r1", no_prefill)
    pending = ahead.Pending(redis(), planned, await picked(redis(), planned))
    # b was excluded since (its NPU failed): the pick ahead may have been b, and is not what the request
    # would pick now.
    assert await pending.claim(pool_of(a, b), [a]) is None
    assert (pools.outstanding(a.id), pools.outstanding(b.id)) == (0, 0)
    again = await pools.acquire(redis(), [a], "r1")  # the request's own pick, under the same id
    assert (again, pools.outstanding(a.id), pools.outstanding(b.id)) == (a, 1, 0)


async def test_a_request_that_ends_without_its_pick_leaves_no_count(redis):
    a = instance("a")
    ahead.remember("qwen", pool_of(a), {})
    planned = ahead.plan("qwen", "r1", no_prefill)
    pending = ahead.Pending(redis(), planned, await picked(redis(), planned))
    assert pools.outstanding(a.id) == 1
    await pending.drop()  # refused (a rate limit), or its client left
    assert pools.outstanding(a.id) == 0
    # A read cut off before its answer came: the request's id is taken off every candidate.
    planned = ahead.plan("qwen", "r2", no_prefill)
    await picked(redis(), planned)
    await ahead.take_back(redis(), planned, None)
    assert pools.outstanding(a.id) == 0


async def test_routed_sleeping_and_excluded_pools_are_not_picked_ahead(redis):
    a, b = instance("a", port=9001), instance("b", port=9002)
    for policy in (routing.PREFIX, routing.SESSION):
        ahead.remember("qwen", pool_of(a, b, policy=policy), {})
        assert ahead.plan("qwen", "r1", no_prefill) is None
    ahead.remember("qwen", pool_of(a, b, idle=True), {})
    assert ahead.plan("qwen", "r1", no_prefill) is None
    ahead.remember("qwen", pool_of(a, b), {"b/0": {"cause": "npu_failed"}})
    assert ahead.plan("qwen", "r1", no_prefill).candidates == (a,)
    ahead.remember("qwen", None, {})  # no deployment serves the name any more
    assert ahead.plan("qwen", "r1", no_prefill) is None


async def test_a_disaggregated_request_picks_its_prefill_and_decode_ahead_as_its_first_attempt_counts_them(
    redis,
):
    p, d = instance("p", "prefill", 9001), instance("d", "decode", 9002)
    ahead.remember("qwen", pool_of(p, d), {})
    body = {
        "model": "qwen", "messages": [{"role": "user", "content": "w " * 3000}], "stream": True,
        "kv_transfer_params": {"do_remote_prefill": True},
    }  # fmt: skip
    headers = {"authorization": "Bearer k"}
    planned = _plan_ahead(
        Request("POST", "/v1/chat/completions", headers, orjson.dumps(body)), "qwen", body, "r1"
    )
    assert planned is not None
    pending = ahead.Pending(redis(), planned, await picked(redis(), planned))
    assert await pending.claim(pool_of(p, d), [p, d]) == (p, d)
    # What pd.open_pair counts its first prefill as, from the body the handler sends on (the usage chunk
    # asked for): the same id, weighed by the same prompt, so its release ends the count made ahead.
    sent = orjson.loads(orjson.dumps({**body, "stream_options": {"include_usage": True}}))
    sent.pop("kv_transfer_params")
    first_attempt = pd.prefill_id("r1", 0, pd.prefill_request(sent))
    assert planned.picks[0].request_id == first_attempt
    assert first_attempt.endswith("~" + str(len(pd.prefill_request(sent)) // pools.WEIGHT_UNIT_BYTES))
    assert store.client().zscore(store.inflight_key(p.id), first_attempt) is not None
    assert pools.outstanding(d.id) == 1


async def test_a_key_read_carries_the_picks_made_ahead(redis):
    a = instance("a")
    ahead.remember("qwen", pool_of(a), {})
    planned = ahead.plan("qwen", "r1", no_prefill)

    async def held():  # an address that guessed keys: refused before the database is asked
        return "held"

    resolved = await identity.resolve_cached("no-such-key", "qwen", guard=held, ahead=planned.commands())
    assert resolved.held == "held"
    assert resolved.picked == (0,)  # refused, yet its pick's answer is there (for the take-back)
    assert pools.outstanding(a.id) == 1


def test_the_web_process_hands_its_event_loop_the_gil_back_within_half_a_millisecond():
    # A thread beside the loop (the gateway's pool read from the database) held each of its wake-ups for up
    # to the default 5 ms: a Redis round trip of 0.5 ms took 5 on most PD requests (bench/pd.py).
    import panel.asgi  # noqa: F401 - the web server's application module sets it

    assert sys.getswitchinterval() <= 0.0005
