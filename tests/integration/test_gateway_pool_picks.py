"""The gateway's pool on Redis and deployment rows alone (panel.gateway.instances.pool): a disaggregated
deployment's prefill goes to the prefill with the least prompt in flight, not the fewest requests, and a
pool entry near its expiry is read again in the background while requests go on. What the pool carries
through the real web server and sim engines: tests/e2e/test_gateway_pool_paths.py."""

import asyncio
import time

import pytest

from panel.catalog.models import Model
from panel.deployments.models import Deployment
from panel.gateway import store
from panel.gateway.access import identity
from panel.gateway.instances import pool
from tests.gateway_helpers import key_for, serving_row
from tests.sim_engine_process import free_port

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(60)]


def prefill_pool(ports: list[int]) -> tuple[list[pool.Instance], list[Deployment]]:
    model = Model.objects.create(name="prefill-pick-model")
    rows, primary = [], None
    for index, port in enumerate(ports):
        name = "pick" if index == 0 else f"pick-r{index + 1}"
        row = serving_row(name, port, model, "pick", role="prefill", replica_of=primary)
        primary = primary or row
        rows.append(row)
    found = pool.pool_for("pick")
    assert found is not None
    return list(found.instances), rows


def test_a_prefill_goes_to_the_prefill_with_the_least_prompt_in_flight(fresh_gateway_state):
    instances, _rows = prefill_pool([free_port(), free_port()])  # rows only: no engine is asked
    first, second = instances
    now = time.time()
    # `first` computes one 40 KiB prompt, `second` three short ones: by request count `first` is the less
    # loaded, by the work in flight `second` is.
    store.client().zadd(store.inflight_key(first.id), {pool.weighed_id("long-prefill", 40 * 1024): now})
    store.client().zadd(
        store.inflight_key(second.id), {pool.weighed_id(f"short-{i}-prefill", 900): now for i in range(3)}
    )

    async def picks() -> list[str]:
        redis = store.aclient()
        chosen = []
        for i in range(3):
            request_id = pool.weighed_id(f"new-{i}-prefill", 2 * 1024)
            chosen.append((await pool.acquire(redis, instances, request_id, weighed=True)).id)
        return chosen

    # 3 units on `second` against 40 on `first`: each new 2 KiB prompt (2 units) goes to `second` until
    # it carries more than `first` would, which three of them do not reach.
    assert asyncio.run(picks()) == [second.id] * 3
    counted = store.client().zrange(store.inflight_key(second.id), 0, -1)
    assert sorted(m for m in counted if m.startswith("new-")) == [f"new-{i}-prefill~2" for i in range(3)]


def test_a_pool_entry_near_its_expiry_is_read_again_while_requests_go_on(fresh_gateway_state, bob):
    """A steady caller never waits for the database: the cached pool, with little of its TTL left, serves
    the request and is read again from the database in the background (its TTL starts over)."""
    model = Model.objects.create(name="refresh-model")
    serving_row("fresh", free_port(), model, "fresh")
    raw = key_for(bob)
    entry = identity.pool_key("fresh")

    async def resolve_twice() -> tuple[int, bool]:
        first = await identity.resolve_cached(raw, "fresh")
        store.client().pexpire(entry, 1000)  # as it stands 4 s after it was read
        second = await identity.resolve_cached(raw, "fresh")
        for _ in range(100):  # the refresh runs on this loop, in the background
            if store.client().pttl(entry) > 3000:
                break
            await asyncio.sleep(0.05)
        return store.client().pttl(entry), second.pool is not None and second.pool == first.pool

    left_ms, same = asyncio.run(resolve_twice())
    assert same
    assert left_ms > 3000
