"""Streams through the /v1 gateway while engines change under them.

A rolling update under load: a client streams chats without a pause while `PUT /api/v1/deployments/chat/`
rolls a changed spec over two replicas of sim engines (a surge replica, each old replica drained and
restarted in place, the surge drained and removed). Not one request may fail or end early; the surge must
have served some of them. Scaling 1 → 3 → 1 under the same client: the new replicas take requests, the
removed ones are drained first. And an engine killed mid-stream: the client's stream ends with an error
event the OpenAI SDKs raise, not silently as if the answer were complete."""

import os
import signal
import threading
import time

import pytest

import panel.deployments.tasks  # noqa: F401  registers the panel's probe ingest on the shared app
from tests.conftest import api_client_for
from tests.deployment_helpers import wait_for
from tests.gateway_helpers import CHAT, deploy, drained, engine_pid, key_for, sse_events, stream_chat
from tests.integration.conftest import TEST_NODE

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.timeout(300),
    pytest.mark.usefixtures("own_ports", "fresh_gateway_state"),
]


class StreamingClient:
    """Streams one chat after another until stopped; keeps each answer's status and whether it ended."""

    def __init__(self, gateway, key):
        self.gateway, self.key = gateway, key
        self.results: list[tuple[int, bool, str]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self._stop.is_set():
            try:
                response, events = stream_chat(self.gateway, self.key, max_tokens=12)
                ended = bool(events) and events[-1] == "[DONE]"
                errors = [e for e in events if isinstance(e, dict) and "error" in e]
                self.results.append((response.status_code, ended and not errors, response.text[-300:]))
            except Exception as error:  # a broken connection is a failed request too
                self.results.append((0, False, repr(error)))

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join(60)

    def failures(self):
        return [r for r in self.results if r[0] != 200 or not r[1]]


def replicas_running(client, name: str, count: int) -> bool:
    """Whether `name` has exactly `count` replicas (itself included), all running."""
    primary = client.get(f"/api/v1/deployments/{name}/").json()
    states = [primary["status"]] + [r["status"] for r in primary["replicas"]]
    return len(states) == count and set(states) == {"running"}


def sim_spec(model, folder, **overrides) -> dict:
    return {
        "model": model.name,
        "path": str(folder),
        "placement": {"node": TEST_NODE, "npus": 1},
        "engine": {"max_model_len": 2048},
        **overrides,
    }


@pytest.mark.usefixtures("reconcile_loop")
def test_a_rolling_update_under_a_streaming_client_fails_no_request(
    node_with_npus, tiny_model, bob, gateway, monkeypatch
):
    monkeypatch.setenv("SIM_ENGINE_START_DELAY", "0.3")
    monkeypatch.setenv("SIM_ENGINE_TOKEN_DELAY", "0.05")  # each answer streams for about half a second
    model, folder = tiny_model
    client = api_client_for(bob)
    spec = sim_spec(model, folder, replicas=2)
    created = client.put("/api/v1/deployments/chat/", spec, format="json")
    assert created.status_code == 201, created.json()

    wait_for(lambda: replicas_running(client, "chat", 2), 60, "two replicas running")
    key = key_for(bob)

    with StreamingClient(gateway, key) as streaming:
        wait_for(lambda: len(streaming.results) >= 3, 30, "the client streaming")
        changed = client.put(
            "/api/v1/deployments/chat/", {**spec, "engine": {"max_model_len": 4096}}, format="json"
        )
        assert changed.status_code == 202, changed.json()
        assert changed.json()["effect"] == "rolling"

        def rolled():
            rollout = client.get("/api/v1/deployments/chat/").json()["rollout"]
            return rollout if rollout["status"] != "running" else None

        rollout = wait_for(rolled, 180, "the rollout to end")
        served_during = len(streaming.results)
        time.sleep(2)  # a few answers from the new replicas
    assert rollout["status"] == "succeeded", rollout
    assert streaming.failures() == [], streaming.failures()[:3]
    assert len(streaming.results) > served_during >= 10

    primary = client.get("/api/v1/deployments/chat/").json()
    assert [r["name"] for r in primary["replicas"]] == ["chat-r2"]  # the surge is gone
    replica = client.get("/api/v1/deployments/chat-r2/").json()
    assert primary["spec"]["max_model_len"] == replica["spec"]["max_model_len"] == 4096
    rows = drained(len(streaming.results), timeout=30)
    instances = {row.instance for row in rows}
    assert "chat-r3/0" in instances, instances  # the surge served while the others were replaced
    assert all(row.status == 200 for row in rows)


@pytest.mark.usefixtures("reconcile_loop")
def test_scaling_one_to_three_and_back_under_a_streaming_client_fails_no_request(
    node_with_npus, tiny_model, bob, gateway, monkeypatch
):
    monkeypatch.setenv("SIM_ENGINE_START_DELAY", "0.3")
    monkeypatch.setenv("SIM_ENGINE_TOKEN_DELAY", "0.05")
    model, folder = tiny_model
    client = api_client_for(bob)
    assert client.put("/api/v1/deployments/chat/", sim_spec(model, folder), format="json").status_code == 201
    wait_for(lambda: replicas_running(client, "chat", 1), 60, "chat running")

    with StreamingClient(gateway, key_for(bob)) as streaming:
        wait_for(lambda: len(streaming.results) >= 3, 30, "the client streaming")
        up = client.put("/api/v1/deployments/chat/", sim_spec(model, folder, replicas=3), format="json")
        assert (up.status_code, up.json()["effect"]) == (202, "scale"), up.json()
        wait_for(lambda: replicas_running(client, "chat", 3), 60, "three replicas running")
        before = len(streaming.results)
        # One stream at a time: every replica idle at each pick, so the tie goes to a random one (the pool's
        # rotation). Nine answers missed a replica one run in forty (2/3 ** 9); thirty, one in 200,000.
        wait_for(lambda: len(streaming.results) >= before + 30, 60, "answers from three replicas")
        down = client.put("/api/v1/deployments/chat/", sim_spec(model, folder, replicas=1), format="json")
        assert (down.status_code, down.json()["effect"]) == (202, "scale"), down.json()
        wait_for(lambda: replicas_running(client, "chat", 1), 60, "back to one replica")
        time.sleep(1)
    assert streaming.failures() == [], streaming.failures()[:3]
    rows = drained(len(streaming.results), timeout=30)
    assert {row.instance for row in rows} == {"chat/0", "chat-r2/0", "chat-r3/0"}
    assert all(row.status == 200 for row in rows)


def test_an_engine_killed_mid_stream_ends_the_stream_with_an_error_event(
    node_with_npus, tiny_model, bob, gateway, monkeypatch
):
    monkeypatch.setenv("SIM_ENGINE_START_DELAY", "0.3")
    monkeypatch.setenv("SIM_ENGINE_TOKEN_DELAY", "0.2")
    model, folder = tiny_model
    deployed = deploy(api_client_for(bob), model, folder, "chat-a", "chat", TEST_NODE, [0])
    key = key_for(bob)
    body = {"model": "chat", **CHAT, "max_tokens": 40, "stream": True}
    received = b""
    with gateway.client(key) as http, http.stream("POST", "/v1/chat/completions", json=body) as response:
        assert response.status_code == 200
        for chunk in response.iter_bytes():
            if not received:
                os.kill(engine_pid(bob, deployed), signal.SIGKILL)  # after the first bytes went out
            received += chunk
    events = sse_events(received.decode())
    assert "[DONE]" not in events
    assert events[-1]["error"]["code"] == "upstream_broken", events[-3:]
    assert events[-1]["error"]["type"] == "server_error"
    (row,) = drained(1)
    assert (row.status, row.error) == (502, "upstream_broken")
