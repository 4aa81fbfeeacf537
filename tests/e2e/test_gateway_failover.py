"""Failover in the gateway, on the real web server and two sim engine processes (docs/serving-plane.md §4):
an instance whose NPU failed gets nothing at once (the panel's Redis entry, before the pool's own cache
turns over), a request whose engine is gone before its first byte is answered by the other one, and a
stream whose engine dies mid-way ends with an OpenAI-shaped error event naming the cause. How a retry is
recorded for an admin: tests/integration/test_gateway_retry_record.py."""

import signal
import time

import pytest

from panel.catalog.models import Model
from panel.gateway import store
from panel.gateway.instances import failover
from panel.nodes.models import Node
from tests.gateway_helpers import chat, drained, fail_npu_of, key_for, replica_on_its_own_node, sse_events
from tests.sim_engine_process import free_port, start_engine, stop, wait_healthy

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(180)]


@pytest.fixture
def two_replicas(fresh_gateway_state):
    """Deployments qwen-a and qwen-b, each on NPU 0 of a node of its own, each a sim engine serving
    `qwen`; yields {name: (deployment, engine process)}."""
    model = Model.objects.create(name="qwen-failover")
    found = {}
    for name in ("qwen-a", "qwen-b"):
        port = free_port()
        process = start_engine(port, env={"SIM_ENGINE_TOKEN_DELAY": "0.05"})
        wait_healthy(f"http://127.0.0.1:{port}", process)
        found[name] = (replica_on_its_own_node(model, name, port), process)
    yield found
    for _deployment, process in found.values():
        stop(process)


def instances_of(rows):
    return {row.instance for row in rows}


def test_an_instance_whose_npu_failed_gets_no_request(live_gateway, two_replicas, bob):
    key = key_for(bob)
    assert chat(live_gateway, key, model="qwen").status_code == 200  # the pool is cached with both now
    published = fail_npu_of(two_replicas["qwen-a"][0])
    assert published["qwen-a/0"]["cause"] == "npu_failed"
    for _ in range(8):
        assert chat(live_gateway, key, model="qwen").status_code == 200
    rows = drained(9)
    assert instances_of(rows[:8]) == {"qwen-b/0"}


def test_a_stale_or_forged_excluded_entry_can_only_exclude(live_gateway, two_replicas, bob):
    key = key_for(bob)
    store.client().set(failover.EXCLUDED_KEY, '{"v": {}}')  # not sealed by the panel: refused, nothing out
    for _ in range(6):
        assert chat(live_gateway, key, model="qwen").status_code == 200
    assert instances_of(drained(6)) == {"qwen-a/0", "qwen-b/0"}
    entry = {"gone/0": {"cause": "npu_failed"}}  # a sealed entry naming an instance the pool does not have
    store.client().set(failover.EXCLUDED_KEY, failover.sealing.seal(failover.EXCLUDED_KEY, entry, 60))
    assert chat(live_gateway, key, model="qwen").status_code == 200


def test_a_request_whose_engine_is_gone_before_its_first_byte_is_answered_by_the_other(
    live_gateway,
    two_replicas,
    bob,
):
    key = key_for(bob)
    assert chat(live_gateway, key, model="qwen").status_code == 200
    dead = two_replicas["qwen-a"][1]
    dead.send_signal(signal.SIGKILL)
    dead.wait(10)
    # qwen-b looks busy, so qwen-a (dead, and still in the pool the database gives) is picked first.
    now = time.time()
    store.client().zadd(store.inflight_key("qwen-b/0"), {f"busy-{i}": now for i in range(3)})
    response = chat(live_gateway, key, model="qwen", stream=True)
    assert response.status_code == 200, response.text
    assert sse_events(response.text)[-1] == "[DONE]"
    first = drained(2)[0]
    assert (first.instance, first.attempts, first.status) == ("qwen-b/0", 2, 200)


def stream_cut_by(gateway, key: str, two_replicas, cause, sent=signal.SIGKILL) -> list:
    """A stream that qwen-a serves, cut after its first token: `cause(deployment)` marks why (a failed NPU,
    a silent node), then its engine gets `sent` (dies, or SIGSTOP: frozen with its connection open, as a host
    that lost power leaves it). The stream's events as the client read them."""
    store.client().zadd(store.inflight_key("qwen-b/0"), {"busy": time.time()})  # qwen-a takes the stream
    deployment, process = two_replicas["qwen-a"]
    with gateway.client(key) as client:
        body = {"model": "qwen", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 200}
        with client.stream("POST", "/v1/chat/completions", json={**body, "stream": True}) as response:
            assert response.status_code == 200
            lines = response.iter_lines()
            assert next(line for line in lines if line.startswith("data:"))  # the first token arrived
            cause(deployment)
            process.send_signal(sent)
            return sse_events("\n".join(lines))


def test_a_stream_cut_mid_way_ends_with_an_error_naming_the_failed_npu(
    live_gateway,
    two_replicas,
    bob,
):
    events = stream_cut_by(live_gateway, key_for(bob), two_replicas, fail_npu_of)
    assert events[-1] != "[DONE]"
    error = events[-1]["error"]
    assert (error["type"], error["code"]) == ("server_error", "npu_failed")
    assert "NPU 0 on node node-qwen-a failed (npu_smi_critical)" in error["message"]
    row = drained(1)[0]
    assert (row.instance, row.status, row.error) == ("qwen-a/0", 502, "npu_failed")


def test_a_cut_with_no_known_cause_names_the_broken_connection(live_gateway, two_replicas, bob):
    key = key_for(bob)
    store.client().zadd(store.inflight_key("qwen-b/0"), {"busy": time.time()})
    _deployment, process = two_replicas["qwen-a"]
    with live_gateway.client(key) as client:
        body = {"model": "qwen", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 200}
        with client.stream("POST", "/v1/chat/completions", json={**body, "stream": True}) as response:
            lines = response.iter_lines()
            assert next(line for line in lines if line.startswith("data:"))
            process.send_signal(signal.SIGKILL)
            events = sse_events("\n".join(lines))
    error = events[-1]["error"]
    assert error["code"] == "upstream_broken"
    assert "mid-stream" in error["message"]


def silent_node_of(deployment):
    """The node stops heartbeating (a host that lost power) and the heartbeat sweep marks it offline: its
    receivers publish the excluded instances once that commits, before any reconcile tick."""
    from datetime import timedelta

    from django.utils import timezone

    from panel.nodes.services import mark_silent_nodes_offline

    node = deployment.nodes.get()
    Node.objects.filter(pk=node.pk).update(
        status="online", last_heartbeat=timezone.now() - timedelta(minutes=1)
    )
    assert mark_silent_nodes_offline() == [node.name]


def test_an_instance_on_a_node_gone_offline_gets_no_request_from_the_sweep_on(
    live_gateway,
    two_replicas,
    bob,
):
    key = key_for(bob)
    assert chat(live_gateway, key, model="qwen").status_code == 200  # the pool is cached with both now
    silent_node_of(two_replicas["qwen-a"][0])
    for _ in range(8):
        assert chat(live_gateway, key, model="qwen").status_code == 200
    assert instances_of(drained(9)[:8]) == {"qwen-b/0"}


def test_a_stream_cut_when_its_node_went_offline_ends_with_an_error_naming_the_node(
    live_gateway,
    two_replicas,
    bob,
):
    events = stream_cut_by(live_gateway, key_for(bob), two_replicas, silent_node_of)
    error = events[-1]["error"]
    assert (error["type"], error["code"]) == ("server_error", "node_offline")
    assert "Node node-qwen-a stopped answering" in error["message"]


def test_a_stream_whose_node_lost_power_ends_naming_the_node_without_waiting_for_the_gap_bound(
    live_gateway,
    two_replicas,
    bob,
):
    """No reset arrives from a frozen engine: only the panel's word that its node is offline ends the wait
    (panel.gateway.instances.silence), seconds after, not at PANEL_GATEWAY_MAX_EVENT_GAP_S (600 s)."""
    process = two_replicas["qwen-a"][1]
    began = time.monotonic()
    try:
        events = stream_cut_by(live_gateway, key_for(bob), two_replicas, silent_node_of, signal.SIGSTOP)
        took = time.monotonic() - began
    finally:
        process.send_signal(signal.SIGCONT)
    assert events[-1] != "[DONE]"
    error = events[-1]["error"]
    assert (error["type"], error["code"]) == ("server_error", "node_offline")
    assert "Node node-qwen-a stopped answering" in error["message"]
    assert took < 30, took  # a behaviour check on a loaded machine: the bound it would have waited is 600 s
    row = drained(1)[0]
    assert (row.instance, row.status, row.error) == ("qwen-a/0", 502, "node_offline")


def test_a_whole_answer_awaited_from_a_node_that_lost_power_is_answered_by_the_other(
    live_gateway,
    two_replicas,
    bob,
):
    """A request that has no byte of its answer yet when its engine freezes and its node is marked offline is
    sent to the other replica, seconds after, not at the read timeout."""
    from concurrent.futures import ThreadPoolExecutor

    (qwen_a, process) = two_replicas["qwen-a"]
    store.client().zadd(store.inflight_key("qwen-b/0"), {"busy": time.time()})  # qwen-a takes it first
    began = time.monotonic()
    try:
        with ThreadPoolExecutor(1) as pool_of_one:
            answer = pool_of_one.submit(chat, live_gateway, key_for(bob), model="qwen", max_tokens=100)
            time.sleep(1)  # it is being generated (0.05 s a token) when the host goes
            process.send_signal(signal.SIGSTOP)
            silent_node_of(qwen_a)
            response = answer.result(60)
        took = time.monotonic() - began
    finally:
        process.send_signal(signal.SIGCONT)
    assert response.status_code == 200, response.text
    assert took < 30, took
    row = drained(1)[0]
    assert (row.instance, row.attempts, row.status) == ("qwen-b/0", 2, 200)


def test_a_whole_answer_from_the_last_replica_when_its_node_lost_power_is_a_502_naming_the_node(
    live_gateway,
    two_replicas,
    bob,
):
    from concurrent.futures import ThreadPoolExecutor

    fail_npu_of(two_replicas["qwen-b"][0])  # only qwen-a serves
    (qwen_a, process) = two_replicas["qwen-a"]
    try:
        with ThreadPoolExecutor(1) as pool_of_one:
            answer = pool_of_one.submit(chat, live_gateway, key_for(bob), model="qwen", max_tokens=100)
            time.sleep(1)
            process.send_signal(signal.SIGSTOP)
            silent_node_of(qwen_a)
            response = answer.result(60)
    finally:
        process.send_signal(signal.SIGCONT)
    assert response.status_code == 502, response.text
    error = response.json()["error"]
    assert (error["type"], error["code"]) == ("server_error", "node_offline")
    assert "Node node-qwen-a stopped answering" in error["message"]
    row = drained(1)[0]
    assert (row.instance, row.status, row.error) == ("qwen-a/0", 502, "node_offline")
