"""Start, stop and delete act on the whole deployment as a person asks them (panel/deployments/commands.py):
Start after a node's drain brings back every replica the spec wants, one replica alone cannot be deleted
(scale instead), and none of them runs while a rolling update does. Agents are not involved: launches and
stops are finished the way the ingest finishes them."""

import pytest
from django.test import Client

from tests.integration.test_deployment_apply import client, npu_node, put, tiny
from tests.integration.test_deployment_replicas import one_npu, rows, settle

pytestmark = pytest.mark.django_db

__all__ = ["client", "npu_node", "tiny"]  # fixtures used by name


def test_start_after_a_drain_brings_back_every_replica(client, tiny, npu_node, bob):
    from panel.deployments.rollouts.node_actions import drain

    put(client, "chat", one_npu(replicas=2))
    settle()
    drain(npu_node)
    settle()
    assert {name: row.observed_state for name, row in rows("chat").items()} == {
        "chat": "stopped",
        "chat-r2": "stopped",
    }
    npu_node.refresh_from_db()
    npu_node.cordoned = False
    npu_node.save()

    page = Client()
    page.force_login(bob)
    assert "0 of 2 wanted running" in page.get("/deployments/chat/").content.decode()

    assert client.post("/api/v1/deployments/chat/start/").status_code == 202
    settle()
    assert "2 of 2 wanted running" in page.get("/deployments/chat/").content.decode()
    assert {name: row.observed_state for name, row in rows("chat").items()} == {
        "chat": "running",
        "chat-r2": "running",
    }
    assert client.get("/api/v1/deployments/chat/").json()["replicas_wanted"] == 2


def test_stop_stops_the_replicas_too(client, tiny):
    put(client, "chat", one_npu(replicas=2))
    settle()
    assert client.post("/api/v1/deployments/chat/stop/").status_code == 202
    settle()
    assert {row.observed_state for row in rows("chat").values()} == {"stopped"}


def test_deleting_one_replica_is_refused_scale_instead(client, tiny):
    put(client, "chat", one_npu(replicas=2))
    settle()
    refused = client.delete("/api/v1/deployments/chat-r2/")
    assert refused.status_code == 409
    assert "scale chat instead" in refused.json()["detail"]
    assert rows("chat")["chat-r2"].desired_state == "running"

    assert client.delete("/api/v1/deployments/chat/").status_code == 202
    settle()
    assert rows("chat") == {}


def test_start_during_a_rolling_update_names_the_rollout(client, tiny):
    put(client, "chat", one_npu(replicas=2))
    settle()
    rolling = put(client, "chat", one_npu(replicas=2, engine={"max_model_len": 4096}))
    assert rolling.json()["effect"] == "rolling"
    refused = client.post("/api/v1/deployments/chat/stop/")
    assert refused.status_code == 409
    rollout = rolling.json()["rollout"]["id"]
    assert f"rollout {rollout} by bob" in refused.json()["detail"]
