"""The wizard's runtime choice: the engine step shows what the node offers (serving venv, container engines,
images, official images for its chip), and with runtime container the plan shows the node's run line."""

import pytest

from panel.catalog.models import Model, ModelArtifact
from panel.core.domain.choices import NpuHealth
from panel.nodes.models import Node, Npu
from tests.wizard_steps import SMALL_QWEN, client_for, engine_fields, walk_to_engine_step

pytestmark = pytest.mark.django_db

FACTS = {
    "containers": {
        "engine": "docker",
        "engines": [
            {
                "name": "docker",
                "reachable": True,
                "client": "24.0.7",
                "server": "24.0.7",
                "error": "",
                "ascend_runtime": "default",
                "images": [{"reference": "quay.io/ascend/vllm-ascend:v0.11.0", "id": "0123456789ab"}],
            },
            {"name": "podman", "reachable": False, "client": "4.3.1", "server": "", "error": "no storage"},
        ],
        "ascend_docker_runtime": {"installed": True, "path": "/usr/local/Ascend/Ascend-Docker-Runtime"},
    }
}


@pytest.fixture
def docker_node(db):
    node = Node.objects.create(name="a2-node", address="127.0.0.1", facts=FACTS)
    for npu_id in range(4):
        Npu.objects.create(
            node=node, npu_id=npu_id, logic_id=npu_id, name="910B3", health=NpuHealth.OK, hbm_total_mb=65536
        )
    return node


@pytest.fixture
def qwen(docker_node):
    model = Model.objects.create(name="Qwen/Qwen2.5-0.5B-Instruct", facts=SMALL_QWEN)
    return ModelArtifact.objects.create(
        model=model, node=docker_node, path="/models/qwen2.5-0.5b", ready=True
    )


def test_the_engine_step_shows_what_the_node_offers(bob, qwen):
    client = client_for(bob)
    walk_to_engine_step(client, qwen)
    page = client.get("/deployments/new/engine/").content.decode()
    assert 'data-testid="offer-a2-node"' in page
    assert "docker 24.0.7 ✓" in page
    assert "Ascend Docker Runtime" in page
    assert '<option value="quay.io/ascend/vllm-ascend:v0.11.0">' in page  # on the node
    assert '<option value="quay.io/ascend/vllm-ascend:v0.23.0-openeuler">' in page  # official, for 910B


def test_the_plan_shows_the_containers_run_line_with_the_ascend_runtime(bob, qwen):
    client = client_for(bob)
    walk_to_engine_step(client, qwen)
    fields = engine_fields(runtime="container", image="quay.io/ascend/vllm-ascend:v0.11.0")
    preview = client.post("/deployments/new/plan/", fields).content.decode()
    assert 'data-testid="plan-errors"' not in preview, preview[:3000]
    assert "docker run -d --name ascend-panel-qwen-small" in preview
    assert "ASCEND_VISIBLE_DEVICES=0" in preview  # the Ascend Docker Runtime hands the NPU over
    assert "--device" not in preview
    wrong = client.post(
        "/deployments/new/plan/", engine_fields(runtime="container", image="")
    ).content.decode()
    assert "Name the image to run" in wrong
