"""The gateway's routing policies (panel/gateway/instances/routing.py): prompts rendered and hashed so a
conversation's next turn matches its last, the holder of the longest prefix chosen within the load bound,
session affinity by header or key; and the Redis script that counts and records a pick makes the same choice
as `choose`."""

import random
import uuid

import pytest

from panel.gateway import store
from panel.gateway.access.identity import Caller
from panel.gateway.instances import pool as pools
from panel.gateway.instances import routing

CALLER = Caller(token_id=7, key="bob/app", user_id=1, allowed_models=(), requests_per_minute=None,
                tokens_per_minute=None)  # fmt: skip
SYSTEM = {"role": "system", "content": "You are a helpful assistant who answers about Ascend NPUs. " * 8}


def chat(*turns):
    return {"model": "qwen", "messages": [SYSTEM, *turns]}


def test_a_conversations_next_turn_starts_with_every_hash_of_its_last_turn():
    first = chat({"role": "user", "content": "What is HCCL? " * 30})
    second = chat(*first["messages"][1:], {"role": "assistant", "content": "A library."},
                  {"role": "user", "content": "And HCCS?"})  # fmt: skip
    one = routing.chunk_hashes(routing.prompt_text("chat/completions", first), 64, 128)
    two = routing.chunk_hashes(routing.prompt_text("chat/completions", second), 64, 128)
    assert len(two) > len(one) > 4
    assert two[: len(one)] == one
    other = chat({"role": "user", "content": "What is HCCS? " * 30})
    three = routing.chunk_hashes(routing.prompt_text("chat/completions", other), 64, 128)
    shared = next(i for i, (a, b) in enumerate(zip(one, three, strict=False)) if a != b)
    assert shared > 0  # the system prompt's chunks are shared, then the hashes part for good
    assert all(a != b for a, b in zip(one[shared:], three[shared:], strict=False))


def test_only_whole_chunks_are_hashed_and_at_most_the_limit():
    assert routing.chunk_hashes(b"x" * 63, 64, 10) == []
    assert len(routing.chunk_hashes(b"x" * 130, 64, 10)) == 2
    assert len(routing.chunk_hashes(b"x" * 6400, 64, 10)) == 10
    hashes = routing.chunk_hashes(b"x" * 128, 64, 10)
    assert hashes[0] != hashes[1]  # the same bytes after another prefix are another block


@pytest.mark.parametrize(
    ("body", "text"),
    [
        ({"prompt": "Once upon"}, b"Once upon"),
        ({"prompt": ["Once upon"]}, b"Once upon"),
        ({"prompt": [1, 2, 3]}, b"1,2,3"),
        ({"prompt": ["a", "b"]}, b""),  # a batch: no one prefix to follow
        ({"prompt": [True, 2]}, b""),
        ({"prompt": {"a": 1}}, b""),
        ({}, b""),
    ],
)
def test_a_completion_prompt_is_itself_and_anything_else_has_no_prefix(body, text):
    assert routing.prompt_text("completions", body) == text


def test_chat_content_parts_and_odd_messages_render_without_error():
    parts = [
        {"type": "text", "text": "hi"},
        {"type": "image_url", "image_url": {"url": "http://x/cat.png"}},
        5,
    ]
    body = {"messages": [{"role": "user", "content": parts}, "junk", {"content": None}]}
    rendered = routing.prompt_text("chat/completions", body)
    assert b"hi\\nhttp://x/cat.png" in rendered
    assert routing.prompt_text("chat/completions", {"messages": "no"}) == b""


def test_route_for_follows_the_policy_and_the_endpoint(settings):
    settings.PANEL_GATEWAY_PREFIX_CHUNK_BYTES = 64
    body = chat({"role": "user", "content": "hello " * 40})
    assert routing.route_for("least_outstanding", "qwen", "chat/completions", body, {}, CALLER) is None
    assert routing.route_for("prefix", "qwen", "embeddings", {"input": "x" * 999}, {}, CALLER) is None
    assert routing.route_for("prefix", "qwen", "completions", {"prompt": "short"}, {}, CALLER) is None
    prefix = routing.route_for("prefix", "qwen", "chat/completions", body, {}, CALLER)
    assert prefix.policy == "prefix"
    assert len(prefix.keys) > 4
    by_key = routing.route_for("session", "qwen", "chat/completions", body, {}, CALLER)
    by_header = routing.route_for("session", "qwen", "completions", {}, {"x-session-id": "s-1"}, CALLER)
    assert len(by_key.keys) == len(by_header.keys) == 1
    assert by_key.keys != by_header.keys
    too_long = routing.route_for("session", "qwen", "completions", {}, {"x-session-id": "s" * 999}, CALLER)
    assert too_long.keys == by_key.keys  # not an id anyone means: the key's affinity


def test_held_lengths_take_each_instances_longest_prefix():
    holders = ["a/0", "a/0", "b/0", None, "b/0", "gone/0"]
    assert routing.held_lengths(holders, ["a/0", "b/0", "c/0"]) == [2, 5, 0]
    assert routing.held_lengths([], ["a/0"]) == [0]


def test_the_longest_holder_wins_while_within_the_bound():
    assert routing.choose([3, 0], [4, 0], margin=2, ratio=0.25) == 1  # 3 > 0 + 2: the least loaded
    assert routing.choose([2, 0], [4, 0], margin=2, ratio=0.25) == 0
    assert routing.choose([2, 1, 0], [2, 5, 0], margin=2, ratio=0.25) == 1
    assert routing.choose([9, 11], [0, 3], margin=2, ratio=0.25) == 1  # 11 <= 9 + 2
    assert routing.choose([9, 12], [0, 3], margin=2, ratio=0.25) == 0  # 25 % of 9, floored, is no more
    assert routing.choose([9, 12], [0, 3], margin=2, ratio=0.5) == 1
    assert routing.choose([8, 12], [0, 3], margin=2, ratio=0.25) == 0


def test_ties_go_to_the_less_loaded_holder_then_to_least_outstanding_by_rotation():
    assert routing.choose([2, 1], [3, 3], margin=2, ratio=0) == 1
    assert routing.choose([1, 1, 1], [0, 0, 0], margin=2, ratio=0, rotation=2) == 2
    assert routing.choose([1, 0, 0], [0, 0, 0], margin=2, ratio=0, rotation=2) == 2
    assert routing.choose([1, 0, 0], [0, 0, 0], margin=2, ratio=0, rotation=0) == 1


def test_a_suspect_holder_is_never_preferred():
    assert routing.choose([pools.SUSPECT_PENALTY, 5], [9, 0], margin=2, ratio=0.25) == 1


@pytest.fixture
def redis(gateway_redis):
    return gateway_redis


def instances(n):
    return [pools.Instance(f"i{k}/0", k, f"i{k}", f"http://127.0.0.1:{9000 + k}/v1", "") for k in range(n)]


async def test_the_redis_pick_agrees_with_choose_over_random_loads_and_holdings(redis, settings):
    settings.PANEL_GATEWAY_ROUTING_MARGIN, settings.PANEL_GATEWAY_ROUTING_MARGIN_RATIO = 2, 0.25
    shuffle = random.Random(35)
    client = store.client()
    for _round in range(60):
        pool = instances(shuffle.randint(1, 4))
        loads = [shuffle.choice([0, 1, 2, 3, 5, 9, 14]) for _ in pool]
        keys = tuple(uuid.uuid4().hex for _ in range(shuffle.randint(1, 6)))
        routes, ages = routing.route_keys("qwen")
        client.delete(routes, ages, *(store.inflight_key(i.id) for i in pool))
        for instance, load in zip(pool, loads, strict=True):
            for n in range(load):
                client.zadd(store.inflight_key(instance.id), {f"old-{n}": 9e9})
        holders = [shuffle.choice([None, *[i.id for i in pool]]) for _ in keys]
        for key, holder in zip(keys, holders, strict=True):
            if holder:
                client.hset(routes, key, holder)
        held = routing.held_lengths(holders, [i.id for i in pool])
        route = routing.Route("prefix", "qwen", keys)
        picked = await pools.acquire(redis(), pool, "new", route)
        # The rotation is random: `choose` with any rotation that agrees on the least loaded is the same.
        expected = {pool[routing.choose(loads, held, 2, 0.25, r)].id for r in range(len(pool))}
        assert picked.id in expected
        assert client.zscore(store.inflight_key(picked.id), "new") is not None  # counted where it went
        assert set(client.hmget(routes, list(keys))) == {picked.id}  # every key now points at it


async def test_recorded_prefixes_are_bounded_and_expire(redis, settings):
    settings.PANEL_GATEWAY_PREFIX_ENTRIES = 10
    settings.PANEL_GATEWAY_PREFIX_TTL_S = 100
    pool = instances(2)
    routes, ages = routing.route_keys("qwen")
    client = store.client()
    for n in range(5):
        keys = tuple(f"k{n}-{j}" for j in range(4))
        await pools.acquire(redis(), pool, f"r{n}", routing.Route("prefix", "qwen", keys))
    assert client.hlen(routes) == client.zcard(ages) == 10
    assert set(client.zrange(ages, 0, -1)) == {f"k{n}-{j}" for n in (3, 4) for j in range(4)} | {
        "k2-2",
        "k2-3",
    }
    assert 0 < client.ttl(routes) <= 100
    client.zadd(ages, {"k4-0": 1.0})  # last used long ago
    await pools.acquire(redis(), pool, "r9", routing.Route("prefix", "qwen", ("fresh",)))
    assert client.hget(routes, "k4-0") is None
    assert client.hget(routes, "fresh") is not None


async def test_a_session_sticks_to_its_instance_until_the_load_bound(redis, settings):
    settings.PANEL_GATEWAY_ROUTING_MARGIN, settings.PANEL_GATEWAY_ROUTING_MARGIN_RATIO = 2, 0.0
    pool = instances(2)
    route = routing.Route("session", "qwen", ("session-a",))
    first = await pools.acquire(redis(), pool, "r0", route)
    picked = [(await pools.acquire(redis(), pool, f"r{n}", route)).id for n in range(1, 4)]
    # r1 and r2 stay (its load 1, then 2, against the other's 0: within 0 + 2); at r3 it has 3: the other.
    assert picked[:2] == [first.id] * 2
    assert picked[2] != first.id


async def test_a_prefill_and_a_routed_decode_are_picked_and_counted_in_one_round_trip(
    redis, settings, monkeypatch
):
    settings.PANEL_GATEWAY_ROUTING_MARGIN, settings.PANEL_GATEWAY_ROUTING_MARGIN_RATIO = 2, 0.25
    prefills, decodes = instances(2), instances(4)[2:]
    client = store.client()
    client.zadd(store.inflight_key(prefills[0].id), {"old~50": 9e9})  # a long prompt in flight on i0
    routes, _ages = routing.route_keys("qwen")
    client.hset(routes, "k1", decodes[1].id)  # i3 served this prefix
    route = routing.Route("prefix", "qwen", ("k1", "k2"))
    rounds = []
    aclient = redis()
    pipeline_type = type(aclient.pipeline())
    execute = pipeline_type.execute

    async def counted(pipeline, *args, **kwargs):
        rounds.append(len(pipeline.command_stack))
        return await execute(pipeline, *args, **kwargs)

    monkeypatch.setattr(pipeline_type, "execute", counted)
    prefill, decode = await pools.acquire_each(
        aclient, [pools.Pick(prefills, "r-prefill~3", weighed=True), pools.Pick(decodes, "r", route)]
    )
    assert rounds == [2]  # both scripts went in one pipeline
    assert (prefill.id, decode.id) == (prefills[1].id, decodes[1].id)
    assert client.zscore(store.inflight_key(prefill.id), "r-prefill~3") is not None
    assert client.zscore(store.inflight_key(decode.id), "r") is not None
    assert client.hmget(routes, ["k1", "k2"]) == [decode.id, decode.id]
