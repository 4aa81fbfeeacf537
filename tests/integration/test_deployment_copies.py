"""A deployment and the model copy it serves, however it was made: linked to the copy (which cannot be
deleted under it), unchanged when the same spec or its own `?format=spec` is applied again, a folder
registered by apply waited for until it is inspected, and a spec without `dtype` unchanged against the dtype
auto came to. Agents are not involved: operations are finished the way the ingest finishes them."""

import pytest

from tests.integration.test_deployment_apply import (
    client,
    npu_node,
    pending,
    put,
    running,
    spec,
    tiny,
)

pytestmark = pytest.mark.django_db

__all__ = ["client", "npu_node", "tiny"]  # fixtures used by name


@pytest.fixture(autouse=True)
def models_under_models(npu_node):
    """The copies here live under /models: a models root of this node (the panel refuses paths outside)."""
    npu_node.models_roots = ["/models"]
    npu_node.save(update_fields=["models_roots"])


def inspected(operation, facts) -> None:
    """The inspection ends as the ingest ends it: its result recorded on the model and its copy."""
    from django.db import transaction

    from panel.operations.services import on_terminal

    operation.status, operation.result = "succeeded", {"facts": facts, "format": "hf"}
    operation.save()
    with transaction.atomic():
        on_terminal(operation)


def wizard_body(model, **overrides):
    """What POST /api/v1/deployments/ takes: the model by id, its folder by path."""
    return {
        "name": "by-post",
        "model": model.pk,
        "path": "/models/tiny-qwen",
        "nodes": [{"node": "npu-a", "npus": [0, 1]}],
        "max_model_len": 2048,
        **overrides,
    }


def test_a_deployment_posted_with_a_path_is_linked_to_its_copy_which_cannot_be_deleted_under_it(client, tiny):
    from panel.catalog.models import ModelArtifact

    copy = ModelArtifact.objects.get(path="/models/tiny-qwen")
    created = client.post("/api/v1/deployments/", wizard_body(tiny), format="json")
    assert created.status_code == 201, created.json()
    assert created.json()["artifact"] == copy.pk

    refused = client.delete(f"/api/v1/model-artifacts/{copy.pk}/")
    assert refused.status_code == 409, refused.json()
    assert "by-post" in refused.json()["detail"]
    assert not pending("model_delete")


def test_applying_the_spec_or_its_own_spec_again_changes_nothing_for_a_posted_deployment(client, tiny):
    assert client.post("/api/v1/deployments/", wizard_body(tiny), format="json").status_code == 201
    running("by-post")
    same = put(client, "by-post", spec(placement={"node": "npu-a", "npus": [0, 1]}))
    assert (same.json()["result"], same.json()["changes"]) == ("unchanged", []), same.json()
    own = client.get("/api/v1/deployments/by-post/?format=spec").json()
    again = put(client, "by-post", own)
    assert (again.json()["result"], again.json()["changes"]) == ("unchanged", []), again.json()
    assert not pending("deploy")


def test_a_deployment_made_before_its_folder_was_linked_gets_the_link_without_a_restart(client, tiny):
    from panel.deployments.models import Deployment

    assert client.post("/api/v1/deployments/", wizard_body(tiny), format="json").status_code == 201
    running("by-post")
    Deployment.objects.filter(name="by-post").update(artifact=None)  # as deployments made before the fix
    answer = put(client, "by-post", spec(placement={"node": "npu-a", "npus": [0, 1]}))
    assert answer.json()["result"] == "unchanged", answer.json()
    assert Deployment.objects.get(name="by-post").artifact.path == "/models/tiny-qwen"
    assert not pending("stop")


def test_a_surge_that_cannot_take_the_npus_a_spec_pins_names_the_deployment_holding_them(client, tiny):
    from panel.deployments.models import Rollout

    pinned = {"node": "npu-a", "npus": [0, 1]}
    assert put(client, "chat", spec(placement=pinned)).status_code == 201
    running("chat")
    rolled = put(client, "chat", spec(placement=pinned, engine={"max_model_len": 1024}))
    assert rolled.json()["effect"] == "rolling", rolled.json()
    message = Rollout.objects.get().message
    assert "NPUs 0, 1 of npu-a serve the deployment chat." in message, message
    assert "another deployment" not in message


def test_a_spec_with_only_a_new_folder_waits_for_its_inspection_then_deploys(client, tiny):
    from panel.catalog.models import Model
    from panel.deployments.models import Deployment

    body = {
        "path": "/models/fresh",
        "placement": {"node": "npu-a", "npus": 1},
        "engine": {"max_model_len": 1024},
    }
    waiting = put(client, "fresh", body, wait="running", timeout=5)
    assert waiting.status_code == 202, waiting.json()
    answer = waiting.json()
    assert (answer["result"], answer["deployment"]) == ("waiting", None)
    assert "is being inspected on npu-a" in answer["warnings"][0]["message"]
    assert not Deployment.objects.exists()
    (inspection,) = pending("model_inspect")
    assert str(inspection.id) == answer["inspection"]

    inspected(inspection, tiny.facts)
    assert Model.objects.get(name="fresh").facts
    created = put(client, "fresh", body)
    assert created.status_code == 201, created.json()
    assert created.json()["deployment"]["artifact"] == Model.objects.get(name="fresh").artifacts.get().pk


def test_a_spec_without_dtype_is_unchanged_against_the_dtype_auto_comes_to(client, tiny):
    assert (tiny.facts or {}).get("dtype") == "bfloat16"
    posted = client.post("/api/v1/deployments/", wizard_body(tiny, dtype="bfloat16"), format="json")
    assert posted.status_code == 201, posted.json()
    running("by-post")
    answer = put(client, "by-post", spec(placement={"node": "npu-a", "npus": [0, 1]}))
    assert (answer.json()["result"], answer.json()["changes"]) == ("unchanged", []), answer.json()
    float16 = put(
        client, "by-post", spec(placement={"node": "npu-a", "npus": [0, 1]}, engine={"dtype": "float16"})
    )
    assert float16.json()["changes"][0] == {"field": "engine.dtype", "from": "bfloat16", "to": "float16"}
