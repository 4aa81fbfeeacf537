"""What the gateway's pool carries so a request pays only for what its deployment uses
(panel.gateway.instances.pool), on the real web server, Redis and sim engines: a pool whose engines cannot
sleep (no `idle:`) neither notes its requests nor looks for a sleeping engine, one that can does both; a
disaggregated deployment's prefill and decode counts end with the request. The prefill pick and the pool's
refresh, on Redis and rows alone: tests/integration/test_gateway_pool_picks.py."""

import json

import pytest

from panel.catalog.models import Model
from panel.deployments import sleep_state
from panel.deployments.models import Deployment
from panel.gateway import store
from panel.gateway.instances import pool
from tests.gateway_helpers import chat, key_for, serving_row
from tests.sim_engine_process import free_port, start_engine, stop, wait_healthy

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(180)]


@pytest.fixture
def engines(fresh_gateway_state):
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


def noted(deployment: Deployment) -> bool:
    return store.client().exists(sleep_state.last_key(deployment.pk)) == 1


def test_only_a_pool_that_can_sleep_notes_requests_and_looks_for_sleepers(live_gateway, engines, bob):
    model = Model.objects.create(name="pool-idle-model")
    (plain_port,) = engines(1, "--served-model-name", "plain")
    (sleepy_port,) = engines(1, "--served-model-name", "sleepy")
    plain = serving_row("plain-chat", plain_port, model, "plain")
    sleepy = serving_row(
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


def test_a_pd_requests_counts_end_on_its_prefill_and_its_decode(live_gateway, engines, bob):
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
        row = serving_row(name, port, model, "pdc", role=role, replica_of=primary)
        primary = primary or row
    long_prompt = " ".join(f"word{i}" for i in range(300))
    key = key_for(bob)
    for _ in range(4):
        answer = chat(live_gateway, key, model="pdc", messages=[{"role": "user", "content": long_prompt}])
        assert answer.status_code == 200, answer.text
    counted = {name: store.client().zrange(store.inflight_key(f"{name}/0"), 0, -1) for name, _role in names}
    assert counted == {"pdc": [], "pdc-r2": [], "pdc-d1": []}
    assert store.client().exists(store.picked_key("pdc-d1/0"))  # it was served through the decode
