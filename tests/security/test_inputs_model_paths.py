"""Paths that reach root on a node, as an operator would try them: a model folder at /etc or behind `..`,
the same through a deploy spec, a copy to a node whose models roots do not hold the path. Each is refused
at the edge naming the field; admins set a node's models roots (normalised, never /)."""

import pytest

from panel.catalog.models import Model, ModelArtifact
from panel.nodes.models import Node, Npu
from panel.operations.models import Operation
from tests.conftest import api_client_for

pytestmark = pytest.mark.django_db

OUTSIDE = ["/etc", "/data/models/../../root", "/data/models", "/data/modelsX/evil", "relative/path"]


@pytest.fixture
def node(db):
    node = Node.objects.create(name="npu-41", transport="agent", models_roots=["/data/models"])
    Npu.objects.create(node=node, npu_id=0, chip_id=0, logic_id=0, name="910B3", hbm_total_mb=65536)
    return node


@pytest.mark.parametrize("path", OUTSIDE)
def test_a_model_folder_outside_the_nodes_models_roots_is_refused_at_registration(node, bob, path):
    answer = api_client_for(bob).post(
        "/api/v1/models/", {"source": "local", "node": node.name, "path": path}, format="json"
    )
    assert answer.status_code == 400, answer.content
    assert "path" in answer.json()["errors"]
    assert not ModelArtifact.objects.exists()
    assert not Operation.objects.exists()


def test_the_refusal_names_the_roots_and_who_changes_them(node, bob):
    answer = api_client_for(bob).post(
        "/api/v1/models/", {"source": "local", "node": node.name, "path": "/etc"}, format="json"
    )
    (message,) = answer.json()["errors"]["path"]
    assert "/data/models" in message
    assert "admin" in message


@pytest.mark.parametrize("path", ["/etc", "/data/models/../../root"])
def test_a_deploy_spec_path_outside_the_models_roots_is_refused(node, bob, path):
    model = Model.objects.create(name="some-model", source="local")
    body = {"name": "evil", "model": model.pk, "path": path, "nodes": [{"node": node.name, "npus": [0]}]}
    answer = api_client_for(bob).post("/api/v1/deployments/", body, format="json")
    assert answer.status_code == 400, answer.content
    assert "path" in answer.json()["errors"]
    assert not Operation.objects.exists()


def test_a_copy_to_a_node_whose_models_roots_do_not_hold_the_path_is_refused(node, bob):
    from django.core.exceptions import ValidationError

    from panel.catalog.copies import start_copy

    node.address = "10.0.0.1"
    node.save()
    target = Node.objects.create(name="npu-42", address="10.0.0.2", models_roots=["/srv/models"])
    model = Model.objects.create(name="copied", source="local")
    artifact = ModelArtifact.objects.create(model=model, node=node, path="/data/models/copied", ready=True)
    with pytest.raises(ValidationError) as refused:
        start_copy(artifact, target, bob)
    assert "target_node" in refused.value.message_dict
    assert not Operation.objects.exists()


def test_admins_set_a_nodes_models_roots_normalised_and_never_slash(node, alice, bob):
    api = api_client_for(alice)
    url = f"/api/v1/nodes/{node.name}/"
    saved = api.patch(url, {"models_roots": ["/data/models/", "/srv/x/../models"]}, format="json")
    assert saved.status_code == 200, saved.content
    node.refresh_from_db()
    assert node.models_roots == ["/data/models", "/srv/models"]
    for bad in (["/"], ["models"], []):
        refused = api.patch(url, {"models_roots": bad}, format="json")
        assert refused.status_code == 400
        assert "models_roots" in refused.json()["errors"]
    assert api_client_for(bob).patch(url, {"models_roots": ["/"]}, format="json").status_code == 403
    node.refresh_from_db()
    assert node.models_roots == ["/data/models", "/srv/models"]


def test_a_folder_inside_a_root_the_admin_added_is_accepted(
    node, alice, bob, django_capture_on_commit_callbacks
):
    api_client_for(alice).patch(
        f"/api/v1/nodes/{node.name}/", {"models_roots": ["/srv/models"]}, format="json"
    )
    with django_capture_on_commit_callbacks(execute=False):
        answer = api_client_for(bob).post(
            "/api/v1/models/",
            {"source": "local", "node": node.name, "path": "/srv/models/qwen"},
            format="json",
        )
    assert answer.status_code == 201, answer.content
    assert ModelArtifact.objects.get().path == "/srv/models/qwen"
