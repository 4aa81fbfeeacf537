"""What the gateway's pool carries so a request pays only for what its deployment uses
(panel.gateway.instances.pool), on the real web server, Redis and sim engines: a pool whose engines cannot
sleep (no `idle:`) neither notes its requests nor looks for a sleeping engine, one that can does both; a
disaggregated deployment's prefill goes to the prefill with the least prompt in flight, not the fewest
requests."""

import asyncio
import json
import time

import pytest

from panel.catalog.models import Model
from panel.core.domain.choices import DeploymentState, DesiredState
from panel.deployments import sleep_state
from panel.deployments.models import Deployment
from panel.gateway import store
from panel.gateway.access import identity
from panel.gateway.instances import pool
from tests.gateway_helpers import chat, key_for, live_gateway  # noqa: F401
from tests.integration.test_gateway_failover import clean_gateway_keys  # noqa: F401
from tests.sim_engine_process import free_port, start_engine, stop, wait_healthy

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(180)]


@pytest.fixture
def engines(clean_gateway_keys):  # noqa: F811
    """Sim engines started by the test: `engines(n)` gives n ports; all are stopped at the end."""
    started = []

    def start(n: int, *extra: str) -> list[int]:
        ports = []
        for _ in range(n):
            port = free_port()
            process = start_engine(port, *extra)
            wait_healthy(f"http://127.0.0.1:{port}", process)
            started.append(process)
            ports.append(port)
        return ports

    yield start
    for process in started:
        stop(process)


def running(name: str, port: int, model: Model, served: str, **fields) -> Deployment:
    return Deployment.objects.create(
        name=name, model=model, desired_state=DesiredState.RUNNING, observed_state=DeploymentState.RUNNING,
        **{"spec": {"port": port, "served_model_name": served}, **fields},
    )  # fmt: skip


def noted(deployment: Deployment) -> bool:
    return store.client().exists(sleep_state.last_key(deployment.pk)) == 1


def test_only_a_pool_that_can_sleep_notes_requests_and_looks_for_sleepers(live_gateway, engines, bob):  # noqa: F811
    model = Model.objects.create(name="pool-idle-model")
    (plain_port,) = engines(1, "--served-model-name", "plain")
    (sleepy_port,) = engines(1, "--served-model-name", "sleepy")
    plain = running("plain-chat", plain_port, model, "plain")
    sleepy = running(
        "sleepy-chat", sleepy_port, model, "sleepy", spec={"port": sleepy_port, "served_model_name": "sleepy",
        "enable_sleep_mode": True},
    )  # fmt: skip
    assert (pool.pool_for("plain").idle, pool.pool_for("sleepy").idle) == (False, True)
    assert (
        pool.Pool.from_dict(pool.pool_for("sleepy").as_dict()).idle is True
    )  # as the gateway's cache keeps it
    store.client().delete(sleep_state.last_key(plain.pk), sleep_state.last_key(sleepy.pk))
    # A sleep mark on an engine that cannot sleep is not the gateway's to act on (nothing could wake it):
    # the request is served, and nothing about sleep is read or written for it.
    store.client().set(sleep_state.asleep_key(plain.pk), "1")
    key = key_for(bob)
    try:
        answer = chat(live_gateway, key, model="plain")
        assert answer.status_code == 200, answer.text
        assert not noted(plain)
        answer = chat(live_gateway, key, model="sleepy")
        assert answer.status_code == 200, answer.text
        assert noted(sleepy)  # the leader's idle step counts quiet time from this request
    finally:
        store.client().delete(sleep_state.asleep_key(plain.pk))


def prefill_pool(ports: list[int]) -> tuple[list[pool.Instance], list[Deployment]]:
    model = Model.objects.create(name="prefill-pick-model")
    rows, primary = [], None
    for index, port in enumerate(ports):
        name = "pick" if index == 0 else f"pick-r{index + 1}"
        row = running(name, port, model, "pick", role="prefill", replica_of=primary)
        primary = primary or row
        rows.append(row)
    found = pool.pool_for("pick")
    assert found is not None
    return list(found.instances), rows


def test_a_prefill_goes_to_the_prefill_with_the_least_prompt_in_flight(engines):
    instances, _rows = prefill_pool(engines(2))
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


def test_a_pd_requests_counts_end_on_its_prefill_and_its_decode(live_gateway, engines, bob):  # noqa: F811
    """The prefill and the decode are picked in one round trip; the prefill's count ends once it answered
    (beside the decode's start), the decode's with the request: nothing stays counted on either after the
    request, which a drain would wait for."""
    model = Model.objects.create(name="pd-count-model")
    names = [("pdc", "prefill"), ("pdc-r2", "prefill"), ("pdc-d1", "decode")]
    primary = None
    for name, role in names:
        kv = {
            "kv_connector": "NixlConnector", "engine_id": name, "kv_port": free_port(),
            "kv_role": "kv_producer" if role == "prefill" else "kv_consumer",
        }  # fmt: skip
        (port,) = engines(1, "--served-model-name", "pdc", "--kv-transfer-config", json.dumps(kv))
        row = running(name, port, model, "pdc", role=role, replica_of=primary)
        primary = primary or row
    long_prompt = " ".join(f"word{i}" for i in range(300))
    key = key_for(bob)
    for _ in range(4):
        answer = chat(live_gateway, key, model="pdc", messages=[{"role": "user", "content": long_prompt}])
        assert answer.status_code == 200, answer.text
    counted = {name: store.client().zrange(store.inflight_key(f"{name}/0"), 0, -1) for name, _role in names}
    assert counted == {"pdc": [], "pdc-r2": [], "pdc-d1": []}
    assert store.client().exists(store.picked_key("pdc-d1/0"))  # it was served through the decode


def test_a_pool_entry_near_its_expiry_is_read_again_while_requests_go_on(clean_gateway_keys, bob):  # noqa: F811
    """A steady caller never waits for the database: the cached pool, with little of its TTL left, serves
    the request and is read again from the database in the background (its TTL starts over)."""
    model = Model.objects.create(name="refresh-model")
    running("fresh", free_port(), model, "fresh")
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
