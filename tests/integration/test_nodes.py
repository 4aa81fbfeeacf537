"""Nodes through the API: who may do what, join tokens (scope, expiry, single use), cordon and removal
rules, field errors, secrets at rest; and heartbeats through a real worker: online, offline, online again."""

import asyncio
import hashlib
import json
from datetime import timedelta

import pytest
from channels.db import database_sync_to_async
from django.db import connection
from django.test import Client
from django.utils import timezone

from tests.conftest import api_client_for
from tests.integration.conftest import TEST_NODE


def beat(node, interval=5.0):
    from panel.nodes.services import record_heartbeat
    from workers.contracts import Heartbeat, utcnow

    data = Heartbeat(node=node, time=utcnow(), agent_version="t", interval_s=interval)
    return record_heartbeat(data.model_dump(mode="json"), signer=node)


def join(node_name, token):
    from django.test import Client

    return Client().post(
        "/nodes/agent/join/", {"node": node_name, "token": token}, content_type="application/json"
    )


@pytest.mark.django_db
def test_an_admin_adds_an_agent_node_and_gets_a_one_line_join_command(alice):
    from panel.nodes.agents.agent_package import agent_sdist, install_script_sha256

    response = api_client_for(alice).post("/api/v1/nodes/", {"name": "npu-07"}, format="json")
    assert response.status_code == 201, response.json()
    body = response.json()
    command = body["join_command"]
    assert command.startswith(
        "curl -fsSL http://testserver/nodes/agent/install.sh -o /tmp/ascend-panel-install.sh"
        f" && echo '{install_script_sha256()}  /tmp/ascend-panel-install.sh' | sha256sum -c --quiet -"
    )
    # The token reaches the script on stdin (printf is a shell builtin): no process shows it in ps.
    piped, _, run = command.rpartition(" | sudo bash ")
    assert piped.endswith(f"printf '%s\\n' {body['join_token']}")
    assert body["join_token"] not in run
    assert "redis://" not in command  # the broker address comes with the credential, from the panel
    served = hashlib.sha256(Client().get("/nodes/agent/ascend-panel.tar.gz").content).hexdigest()
    assert served == hashlib.sha256(agent_sdist()).hexdigest()
    assert run.endswith(f"--node npu-07 --package-sha256 {served}")


@pytest.mark.django_db
def test_the_join_token_is_traded_once_for_its_nodes_credential_and_no_other(alice):
    from panel.nodes.agents.trust import agent_key
    from panel.nodes.models import Node

    token = (
        api_client_for(alice).post("/api/v1/nodes/", {"name": "npu-07"}, format="json").json()["join_token"]
    )
    assert join("npu-08", token).status_code == 403  # scoped to its node name
    response = join("npu-07", token)
    assert response.status_code == 200, response.content
    node = Node.objects.get(name="npu-07")
    assert node.transport == "agent"
    assert response.json()["agent_key"] == agent_key(node).decode()
    assert response.json()["broker_url"].startswith("redis://")
    assert join("npu-07", token).status_code == 403  # single use
    node.delete()
    assert join("npu-07", token).status_code == 403


@pytest.mark.django_db
def test_an_expired_join_token_registers_nothing(alice):
    from panel.nodes.agents.join import issue_join_token
    from panel.nodes.models import Node

    token = issue_join_token("npu-09", lifetime=timedelta(seconds=-1))
    response = join("npu-09", token)
    assert response.status_code == 403
    assert "expired" in response.json()["detail"]
    assert not Node.objects.filter(name="npu-09").exists()


@pytest.mark.django_db
def test_joining_again_rotates_the_credential_and_the_old_one_stops_working(alice):
    from panel.nodes.agents.join import issue_join_token

    old_key = join("npu-10", issue_join_token("npu-10")).json()["agent_key"]
    new_key = join("npu-10", issue_join_token("npu-10", rotate_credential=True)).json()["agent_key"]
    assert old_key != new_key
    assert heartbeat_signed_with("npu-10", old_key) is False
    assert heartbeat_signed_with("npu-10", new_key) is True


def heartbeat_signed_with(node_name, key):
    from panel.nodes.models import Node
    from panel.nodes.tasks import heartbeat
    from workers.contracts import Heartbeat, utcnow
    from workers.identity import seal_for_panel, use_keys
    from workers.task_names import HEARTBEAT

    use_keys({node_name: key.encode()})
    body = Heartbeat(node=node_name, time=utcnow(), agent_version="t").model_dump(mode="json")
    Node.objects.filter(name=node_name).update(last_heartbeat=None)
    heartbeat(seal_for_panel(HEARTBEAT, node_name, body))
    return Node.objects.get(name=node_name).last_heartbeat is not None


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("payload", "field"),
    [
        ({"name": "not a slug"}, "name"),
        ({"name": "add"}, "name"),
        (
            {
                "name": "s1",
                "transport": "ssh",
                "address": "h",
                "username": "u",
                "password": "p",
                "port": 70000,
            },
            "port",
        ),
        (
            {"name": "s1", "transport": "ssh", "address": "bad host!", "username": "u", "password": "p"},
            "address",
        ),
        ({"name": "s1", "transport": "ssh", "address": "10.0.0.1", "username": "u"}, "client_key"),
        (
            {"name": "s1", "transport": "ssh", "address": "10.0.0.1", "username": "u", "client_key": "junk"},
            "client_key",
        ),
    ],
)
def test_bad_input_is_refused_with_the_field_that_is_wrong(alice, payload, field):
    response = api_client_for(alice).post("/api/v1/nodes/", payload, format="json")
    assert response.status_code == 400
    assert field in response.json()["errors"], response.json()


@pytest.mark.django_db
def test_only_admins_add_or_remove_operators_cordon_viewers_read(alice, bob, charlie):
    from panel.nodes.models import Node

    node = Node.objects.create(name="n1")
    assert api_client_for(charlie).get(f"/api/v1/nodes/{node.pk}/").status_code == 200
    assert api_client_for(charlie).post(f"/api/v1/nodes/{node.pk}/cordon/").status_code == 403
    assert api_client_for(bob).post("/api/v1/nodes/", {"name": "n2"}, format="json").status_code == 403
    assert api_client_for(bob).delete(f"/api/v1/nodes/{node.pk}/").status_code == 403
    response = api_client_for(bob).post(f"/api/v1/nodes/{node.pk}/cordon/")
    assert response.status_code == 200
    assert response.json()["cordoned"] is True
    assert api_client_for(bob).post(f"/api/v1/nodes/{node.pk}/uncordon/").json()["cordoned"] is False
    assert api_client_for(alice).delete(f"/api/v1/nodes/{node.pk}/").status_code == 204
    assert not Node.objects.filter(name="n1").exists()


@pytest.mark.django_db
def test_removing_a_node_with_a_running_deployment_is_refused_unless_forced(alice):
    from panel.catalog.models import Model
    from panel.deployments.models import Deployment
    from panel.nodes.models import Node

    node = Node.objects.create(name="busy")
    deployment = Deployment.objects.create(
        name="qwen", model=Model.objects.create(name="Qwen"), observed_state="running"
    )
    deployment.nodes.add(node)
    refused = api_client_for(alice).delete(f"/api/v1/nodes/{node.pk}/")
    assert refused.status_code == 409
    assert "qwen" in refused.json()["detail"]
    assert "force" in refused.json()["detail"]
    assert api_client_for(alice).delete(f"/api/v1/nodes/{node.pk}/?force=true").status_code == 204
    deployment.refresh_from_db()
    assert deployment.observed_state == "failed"
    assert "busy" in deployment.reason


@pytest.mark.django_db
def test_removing_a_node_whose_model_copy_a_deployment_was_made_from_is_a_409_then_forced_a_204(alice):
    """It was a 500: the copy goes with the node, and the deployment's link to it protected it."""
    from panel.catalog.models import Model, ModelArtifact
    from panel.deployments.models import Deployment
    from panel.nodes.models import Node

    node = Node.objects.create(name="holder")
    model = Model.objects.create(name="Qwen")
    copy = ModelArtifact.objects.create(model=model, node=node, path="/models/qwen")
    stopped = Deployment.objects.create(name="qwen-old", model=model, artifact=copy, observed_state="stopped")
    client = api_client_for(alice)
    refused = client.delete(f"/api/v1/nodes/{node.name}/")
    assert refused.status_code == 409
    assert "qwen-old" in refused.json()["detail"]
    assert client.delete(f"/api/v1/nodes/{node.name}/?force=true").status_code == 204
    stopped.refresh_from_db()
    assert stopped.artifact is None
    assert not ModelArtifact.objects.filter(pk=copy.pk).exists()


@pytest.mark.django_db
def test_an_ssh_nodes_secret_is_stored_encrypted(alice):
    from panel.core.infra.secrets import decrypt
    from panel.nodes.lifecycle import sealed_credentials
    from panel.nodes.models import Node

    node = Node.objects.create(
        name="s1", transport="ssh", ssh_secret=sealed_credentials(password="pa55-w0rd-xyz")
    )
    with connection.cursor() as cursor:
        cursor.execute("SELECT ssh_secret FROM nodes_node WHERE id = %s", [node.pk])
        stored = cursor.fetchone()[0]
    assert "pa55-w0rd-xyz" not in stored
    assert json.loads(decrypt(stored)) == {"password": "pa55-w0rd-xyz"}


@pytest.mark.django_db
def test_inventory_of_an_ssh_node_waits_for_the_confirmed_host_key(bob):
    from panel.nodes.models import Node

    node = Node.objects.create(name="s2", transport="ssh", address="10.0.0.2", ssh_username="root")
    response = api_client_for(bob).post(f"/api/v1/nodes/{node.pk}/inventory/")
    assert response.status_code == 409
    assert "host key" in response.json()["detail"]


@pytest.mark.django_db(transaction=True)
@pytest.mark.timeout(60)
async def test_a_silent_agent_is_offline_after_three_intervals_and_online_when_it_beats_again(celery_worker):
    from panel.nodes.models import Node
    from panel.nodes.services import mark_silent_nodes_offline
    from workers.contracts import Heartbeat, utcnow
    from workers.events import send_to_panel
    from workers.task_names import HEARTBEAT

    await database_sync_to_async(Node.objects.create)(name=TEST_NODE, transport="agent")

    async def send_beat_and_wait_online():
        beat = Heartbeat(node=TEST_NODE, time=utcnow(), agent_version="t", interval_s=0.3)
        await database_sync_to_async(send_to_panel)(HEARTBEAT, beat.model_dump(mode="json"))
        for _ in range(100):
            node = await database_sync_to_async(Node.objects.get)(name=TEST_NODE)
            if node.status == "online" and node.last_heartbeat > timezone.now() - timedelta(seconds=0.9):
                return node
            await asyncio.sleep(0.05)
        raise AssertionError("the heartbeat did not reach the panel")

    node = await send_beat_and_wait_online()
    assert node.effective_status == "online"
    await asyncio.sleep(1.0)  # more than three 0.3 s intervals
    node = await database_sync_to_async(Node.objects.get)(name=TEST_NODE)
    assert node.effective_status == "offline"  # at once, before any sweep ran
    assert await database_sync_to_async(mark_silent_nodes_offline)() == [TEST_NODE]
    node = await send_beat_and_wait_online()
    assert node.status == "online"
    assert node.effective_status == "online"
