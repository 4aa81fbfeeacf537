"""Engine ports that are really free, with the real agent, real sockets and the sim engine: ports are
counted per host address (a second node on 127.0.0.1 shares this host's ports), a port another process
listens on is refused by the agent, and the panel moves a port it picked (one restart, counted) or fails a
port the user gave at once (no restart loop)."""

import contextlib
import socket

import pytest

import panel.deployments.tasks  # noqa: F401  registers the panel's probe ingest on the shared app
from tests.conftest import api_client_for
from tests.deployment_helpers import (
    deployment_json,
    free_port_pair,
    reconcile_loop,  # noqa: F401  a fixture, used by name
    wait_for,
)
from tests.integration.conftest import TEST_NODE

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(180)]


def free_port_block(size: int) -> int:
    """A port from which `size` ports in a row are free on loopback (checked by binding each)."""
    for _attempt in range(50):
        base = free_port_pair()
        with contextlib.ExitStack() as held:
            try:
                for port in range(base, base + size):
                    sock = held.enter_context(socket.socket())
                    sock.bind(("127.0.0.1", port))
            except OSError:
                continue
        return base
    raise RuntimeError(f"no {size} free ports in a row on loopback")


@pytest.fixture
def base_port(settings):
    settings.PANEL_DEPLOY_BASE_PORT = free_port_block(6)
    return settings.PANEL_DEPLOY_BASE_PORT


@pytest.fixture
def squatter():
    """`squatter(port)`: another process's listener on 127.0.0.1:port, for the length of the test."""
    sockets = []

    def listen(port: int) -> socket.socket:
        sock = socket.socket()
        sock.bind(("127.0.0.1", port))
        sock.listen()
        sockets.append(sock)
        return sock

    yield listen
    for sock in sockets:
        sock.close()


@pytest.fixture
def neighbour_on_this_host(node_with_npus, tiny_model, base_port):
    """A second node on the same address (as sim-duo beside sim-a2) whose deployment holds the first port."""
    from panel.catalog.models import Model
    from panel.deployments.models import Deployment
    from panel.nodes.models import Node

    node_with_npus.address = "127.0.0.1"
    node_with_npus.save(update_fields=["address"])
    duo = Node.objects.create(name="it-duo", transport="agent", address="127.0.0.1")
    model = Model.objects.create(name="tiny-llama", facts=tiny_model[1])
    neighbour = Deployment.objects.create(
        name="on-duo", model=model, spec={"port": base_port, "parts": []}, observed_state="running"
    )
    neighbour.nodes.set([duo])
    return model


def deploy_operations(name):
    from panel.operations.models import Operation

    return list(Operation.objects.filter(kind="deploy", target=name).order_by("created"))


@pytest.mark.usefixtures("reconcile_loop")
def test_a_picked_port_skips_the_other_nodes_port_and_moves_off_a_port_another_process_holds(
    celery_worker, neighbour_on_this_host, tiny_model, base_port, squatter, bob
):
    squatter(base_port + 2)  # the port the panel picks next to it-duo's deployment
    client = api_client_for(bob)
    body = {
        "name": "tiny",
        "model": neighbour_on_this_host.pk,
        "path": str(tiny_model[0]),
        "nodes": [{"node": TEST_NODE, "npus": [1]}],
    }
    review = client.post("/api/v1/deployments/plan/", body, format="json").json()
    assert review["nodes"][0]["launch"]["port"] == base_port + 2  # not it-duo's, though another node's
    pk = client.post("/api/v1/deployments/", body, format="json").json()["id"]

    running = wait_for(lambda: (d := deployment_json(client, pk))["status"] == "running" and d, 60, "running")
    assert running["spec"]["port"] == base_port + 4
    assert running["restart_count"] == 1  # the start on the taken port, then the one that ran
    assert running["failed_restarts"] == 0
    refused, ran = deploy_operations("tiny")
    assert (refused.status, refused.result["code"], refused.result["port"]) == (
        "failed",
        "port_in_use",
        base_port + 2,
    )
    assert ran.status == "succeeded"
    lines = [row["line"] for row in client.get(f"/api/v1/deployments/{pk}/logs/").json()["results"]]
    assert any(f"Port {base_port + 2} is taken on {TEST_NODE}" in line for line in lines), lines
    assert client.post(f"/api/v1/deployments/{pk}/stop/").status_code == 202
    wait_for(lambda: deployment_json(client, pk)["status"] == "stopped", 30, "stopped")


@pytest.mark.usefixtures("reconcile_loop")
def test_a_port_the_user_gave_that_another_process_holds_fails_at_once(
    celery_worker, neighbour_on_this_host, tiny_model, base_port, squatter, bob
):
    squatter(base_port + 2)
    client = api_client_for(bob)
    body = {
        "name": "pinned",
        "model": neighbour_on_this_host.pk,
        "path": str(tiny_model[0]),
        "nodes": [{"node": TEST_NODE, "npus": [1]}],
        "port": base_port + 2,
    }
    pk = client.post("/api/v1/deployments/", body, format="json").json()["id"]
    failed = wait_for(lambda: (d := deployment_json(client, pk))["status"] == "failed" and d, 30, "failed")
    assert f"port {base_port + 2} is already in use on this node" in failed["reason"]
    assert (failed["restart_count"], failed["next_restart_at"]) == (0, None)
    assert [op.status for op in deploy_operations("pinned")] == ["failed"]


def test_a_port_the_user_gives_that_a_deployment_on_the_same_address_holds_is_refused(
    neighbour_on_this_host, tiny_model, base_port, bob
):
    body = {
        "name": "clash",
        "model": neighbour_on_this_host.pk,
        "path": str(tiny_model[0]),
        "nodes": [{"node": TEST_NODE, "npus": [1]}],
        "port": base_port + 1,
    }
    answer = api_client_for(bob).post("/api/v1/deployments/", body, format="json")
    assert answer.status_code == 400
    assert "on-duo" in answer.json()["errors"]["port"][0]
