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


def test_a_surge_for_a_spec_that_pins_npus_takes_free_npus_of_its_own_on_that_node(client, tiny):
    """The pinned NPUs are the replica's the surge stands in for (docs/deployment-spec.md, Surge): a surge
    that waited for them could never start, and `rollout undo` restarted the only replica in place."""
    from panel.deployments.models import Deployment, Rollout

    pinned = {"node": "npu-a", "npus": [0, 1]}
    assert put(client, "chat", spec(placement=pinned)).status_code == 201
    running("chat")
    rolled = put(client, "chat", spec(placement=pinned, engine={"max_model_len": 1024}))
    assert rolled.json()["effect"] == "rolling", rolled.json()
    rollout = Rollout.objects.get()
    assert "No free NPUs" not in rollout.message, rollout.message
    surge = Deployment.objects.get(name=rollout.surge)
    assert [node.name for node in surge.nodes.all()] == ["npu-a"]
    pinned_rows = set(Deployment.objects.get(name="chat").npus.values_list("pk", flat=True))
    surge_rows = set(surge.npus.values_list("pk", flat=True))
    assert len(surge_rows) == 2, surge_rows
    assert not pinned_rows & surge_rows, (pinned_rows, surge_rows)


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


def test_a_dry_run_refuses_a_folder_the_apply_would_refuse(client, tiny):
    from panel.catalog.models import Model

    body = {"path": "/etc/fresh", "placement": {"node": "npu-a", "npus": 1}}
    dry = put(client, "fresh", body, dry_run="true")
    real = put(client, "fresh", body)
    assert (dry.status_code, real.status_code) == (400, 400), (dry.json(), real.json())
    assert dry.json()["errors"] == real.json()["errors"]
    assert "path" in dry.json()["errors"]
    assert not Model.objects.filter(name="fresh").exists()
    allowed = put(client, "fresh", {**body, "path": "/models/fresh"}, dry_run="true")
    assert allowed.status_code == 201, allowed.json()
    assert not Model.objects.filter(name="fresh").exists()


def test_a_failed_inspection_is_the_answer_to_every_apply_after_it(client, tiny):
    from panel.operations.models import Operation

    body = {"path": "/models/fresh", "placement": {"node": "npu-a", "npus": 1}}
    assert put(client, "fresh", body).json()["result"] == "waiting"
    (inspection,) = pending("model_inspect")
    Operation.objects.filter(pk=inspection.pk).update(
        status="failed", error="config.json is missing in /models/fresh", hint="Copy the whole model folder."
    )
    for _ in range(2):
        again = put(client, "fresh", body)
        assert again.status_code == 400, again.json()
        (message,) = again.json()["errors"]["path"]
        assert "config.json is missing in /models/fresh" in message
        assert "Copy the whole model folder." in message
        assert str(inspection.pk) in message
