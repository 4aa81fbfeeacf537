"""Declarative apply (`PUT /api/v1/deployments/{name}/`) as a CI pipeline calls it: create, unchanged,
changed (restart, move NPUs, stop), dry runs, the spec round trip in JSON and YAML, and models by name.
Agents are not involved: launches and stops are finished the way the ingest finishes them."""

import pytest
import yaml

from tests.conftest import api_client_for

pytestmark = pytest.mark.django_db

YAML = "application/yaml"


@pytest.fixture
def npu_node():
    from panel.nodes.models import Node, Npu

    node = Node.objects.create(name="npu-a", transport="agent", status="online", address="10.2.0.1")
    for logic_id in range(4):
        Npu.objects.create(
            node=node,
            npu_id=logic_id,
            logic_id=logic_id,
            name="910B3",
            hbm_total_mb=65536,
            numa_node=logic_id // 2,
        )
    return node


@pytest.fixture
def tiny(tmp_path, npu_node):
    from panel.catalog.models import Model, ModelArtifact
    from workers.models.inspect import inspect_model
    from workers.models.tiny import main as make_tiny

    assert make_tiny([str(tmp_path / "tiny"), "--arch", "qwen2"]) == 0
    model = Model.objects.create(
        name="tiny-qwen", repo_id="Acme/Tiny-Qwen", facts=inspect_model(tmp_path / "tiny")
    )
    ModelArtifact.objects.create(model=model, node=npu_node, path="/models/tiny-qwen", ready=True)
    return model


@pytest.fixture
def client(bob):
    return api_client_for(bob)


def spec(**overrides):
    body = {
        "model": "tiny-qwen",
        "path": "/models/tiny-qwen",
        "placement": {"node": "npu-a", "npus": 2},
        "engine": {"max_model_len": 2048},
    }
    body.update(overrides)
    return body


def put(client, name, body, **params):
    query = "&".join(f"{key}={value}" for key, value in params.items())
    return client.put(f"/api/v1/deployments/{name}/?{query}", body, format="json")


def finish(operation, status="succeeded", result=None):
    from django.db import transaction

    from panel.deployments.rollouts.reconcile import on_operation_terminal

    operation.status, operation.result = status, result or {}
    operation.save()
    with transaction.atomic():
        on_operation_terminal(operation)


def pending(kind):
    from panel.operations.models import Operation

    return list(Operation.objects.filter(kind=kind, status="pending"))


def running(name):
    """Finish the pending launch: the deployment runs."""
    from panel.deployments.models import Deployment

    (launch,) = pending("deploy")
    finish(launch, result={"runtime": {"pid": 100, "port": 8000, "log_path": "/x.log"}})
    assert Deployment.objects.get(name=name).observed_state == "running"


def test_a_dry_run_plans_and_creates_nothing(client, tiny):
    from panel.deployments.models import Deployment

    answer = put(client, "ci-qwen", spec(), dry_run="true")
    assert answer.status_code == 201, answer.json()
    body = answer.json()
    assert (body["result"], body["effect"], body["dry_run"]) == ("created", "create", True)
    assert body["deployment"] is None
    assert body["plan"]["nodes"][0]["logic_ids"] == [0, 1]  # two free NPUs on one NUMA node
    assert not Deployment.objects.exists()
    assert not pending("deploy")


def test_apply_creates_then_finds_the_same_spec_unchanged(client, tiny):
    created = put(client, "ci-qwen", spec())
    assert created.status_code == 201, created.json()
    body = created.json()
    assert body["result"] == "created"
    assert body["deployment"]["name"] == "ci-qwen"
    assert body["deployment"]["placement"] == [{"node": "npu-a", "npus": [0, 1]}]
    assert len(pending("deploy")) == 1
    running("ci-qwen")

    again = put(client, "ci-qwen", spec())
    assert again.status_code == 200, again.json()
    assert (again.json()["result"], again.json()["effect"], again.json()["changes"]) == (
        "unchanged",
        "none",
        [],
    )
    assert not pending("deploy")
    assert not pending("stop")


def test_the_spec_round_trips_in_json_and_yaml(client, tiny):
    assert put(client, "ci-qwen", spec()).status_code == 201
    running("ci-qwen")
    as_json = client.get("/api/v1/deployments/ci-qwen/?format=spec")
    assert as_json.status_code == 200
    exported = as_json.json()
    assert exported["placement"] == {"node": "npu-a", "npus": [0, 1]}
    assert exported["engine"]["max_model_len"] == 2048
    assert put(client, "ci-qwen", exported).json()["result"] == "unchanged"

    as_yaml = client.get("/api/v1/deployments/ci-qwen/?format=spec", HTTP_ACCEPT=YAML)
    assert as_yaml["Content-Type"].startswith(YAML)
    text = as_yaml.content.decode()
    assert yaml.safe_load(text) == exported
    answer = client.put("/api/v1/deployments/ci-qwen/", text, content_type=YAML)
    assert answer.status_code == 200, answer.json()
    assert answer.json()["result"] == "unchanged"


def test_a_changed_setting_rolls_with_a_surge_on_the_new_launch(client, tiny):
    """With two free NPUs beside it, the change starts a surge replica first (docs/deployment-spec.md);
    the whole rollout is tested in test_deployment_replicas.py."""
    from panel.deployments.models import Deployment

    put(client, "ci-qwen", spec())
    running("ci-qwen")
    changed = put(client, "ci-qwen", spec(engine={"max_model_len": 4096}))
    assert changed.status_code == 202, changed.json()
    body = changed.json()
    assert (body["result"], body["effect"]) == ("changed", "rolling")
    assert {"field": "engine.max_model_len", "from": 2048, "to": 4096} in body["changes"]
    assert (body["rollout"]["status"], body["rollout"]["phase"]) == ("running", "surge")
    assert not pending("stop")  # the old engine keeps serving
    (launch,) = pending("deploy")
    assert launch.target == "ci-qwen-r2"
    assert launch.task_kwargs["payload"]["spec"]["max_model_len"] == 4096
    assert launch.task_kwargs["payload"]["spec"]["served_model_name"] == "ci-qwen"
    assert Deployment.objects.get(name="ci-qwen").observed_state == "running"


def test_a_dry_run_of_a_change_says_what_would_change_and_does_nothing(client, tiny):
    put(client, "ci-qwen", spec())
    running("ci-qwen")
    answer = put(client, "ci-qwen", spec(engine={"max_model_len": 4096}), dry_run="true")
    assert answer.status_code == 202
    assert answer.json()["effect"] == "rolling"
    assert answer.json()["rollout"] is None
    assert not pending("stop")
    assert not pending("deploy")
    assert client.get("/api/v1/deployments/ci-qwen/?format=spec").json()["engine"]["max_model_len"] == 2048


def test_more_npus_move_the_deployment(client, tiny):
    from panel.deployments.models import Deployment

    put(client, "ci-qwen", spec())
    running("ci-qwen")
    # No four free NPUs for a surge: it stops serving while it moves, which the apply must confirm.
    refused = put(client, "ci-qwen", spec(placement={"node": "npu-a", "npus": 4}))
    assert "allow_downtime" in refused.json()["errors"]
    moved = put(client, "ci-qwen", spec(placement={"node": "npu-a", "npus": 4}), allow_downtime="true")
    assert moved.status_code == 202, moved.json()
    assert moved.json()["effect"] == "rolling"
    fields = {change["field"] for change in moved.json()["changes"]}
    assert {"placement", "engine.tensor_parallel_size"} <= fields
    # No four free NPUs for a surge: replaced in place, and the rollout says so.
    assert "replaced in place" in moved.json()["rollout"]["message"]
    held = sorted(Deployment.objects.get(name="ci-qwen").npus.values_list("logic_id", flat=True))
    assert held == [0, 1, 2, 3]
    assert len(pending("stop")) == 1


def test_state_stopped_stops_and_running_starts_again(client, tiny):
    from panel.deployments.models import Deployment

    put(client, "ci-qwen", spec())
    running("ci-qwen")
    stopped = put(client, "ci-qwen", spec(state="stopped"))
    assert stopped.json()["effect"] == "stop"
    finish(pending("stop")[0])
    assert Deployment.objects.get(name="ci-qwen").observed_state == "stopped"
    started = put(client, "ci-qwen", spec())
    assert started.json()["effect"] == "start"
    assert len(pending("deploy")) == 1


def test_a_spec_created_stopped_holds_its_npus_without_starting(client, tiny):
    from panel.deployments.models import Deployment

    answer = put(client, "ci-qwen", spec(state="stopped"))
    assert answer.status_code == 201, answer.json()
    deployment = Deployment.objects.get(name="ci-qwen")
    assert (deployment.desired_state, deployment.observed_state) == ("stopped", "stopped")
    assert deployment.npus.count() == 2
    assert not pending("deploy")


def test_apply_while_a_start_runs_is_refused(client, tiny):
    put(client, "ci-qwen", spec())
    answer = put(client, "ci-qwen", spec(engine={"max_model_len": 4096}))
    assert answer.status_code == 409
    assert "current start or stop" in answer.json()["detail"]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        (spec(tensor_parallel=4), "tensor_parallel"),
        (spec(engine={"tensor_parallel": 4}), "engine"),
        (spec(placement={"node": "npu-a", "npu": 2}), "placement"),
        (spec(replicas=3, placement={"node": "npu-a", "npus": [0]}), "replicas"),
        (spec(replicas=3), "replicas"),  # 3 x 2 NPUs on a node of 4
        (spec(runtime="container"), "image"),
        (spec(runtime="container", image="quay.io/ascend/vllm-ascend:v0.11.0"), "runtime"),
        (spec(image="quay.io/ascend/vllm-ascend:v0.11.0"), "image"),
        (spec(name="other-name"), "name"),
        (spec(placement={"node": "npu-a", "npus": "many"}), "placement"),
        (spec(model="no-such-model", path=""), "model"),
        (spec(placement={"node": "npu-a", "npus": 8}), "placement"),
    ],
)
def test_a_wrong_spec_is_refused_with_the_field(client, tiny, body, field):
    from panel.deployments.models import Deployment

    answer = put(client, "ci-qwen", body)
    assert answer.status_code == 400, answer.json()
    assert field in str(answer.json()["errors"]), answer.json()
    assert "ErrorDetail" not in answer.content.decode()
    assert not Deployment.objects.exists()


def test_the_model_by_hub_id_or_id_and_the_copy_by_path(client, tiny):
    by_hub = put(client, "by-hub", spec(model="Acme/Tiny-Qwen"), dry_run="true")
    assert by_hub.status_code == 201, by_hub.json()
    by_id = put(client, "by-id", spec(model=str(tiny.pk)), dry_run="true")
    assert by_id.status_code == 201, by_id.json()
    by_path = put(client, "by-path", {"path": "/models/tiny-qwen", "placement": {"node": "npu-a", "npus": 1}})
    assert by_path.status_code == 201, by_path.json()
    assert by_path.json()["deployment"]["model_name"] == "tiny-qwen"


def test_auto_takes_the_planners_smallest_layout(client, tiny):
    answer = put(client, "ci-qwen", spec(placement={"npus": "auto"}), dry_run="true")
    assert answer.status_code == 201, answer.json()
    assert answer.json()["plan"]["nodes"][0]["node"] == "npu-a"
    assert len(answer.json()["plan"]["nodes"][0]["logic_ids"]) == 1  # the tiny model fits one NPU


def test_a_yaml_spec_is_applied_and_bad_yaml_is_a_400(client, tiny):
    text = yaml.safe_dump(spec())
    answer = client.put("/api/v1/deployments/ci-qwen/", text, content_type=YAML)
    assert answer.status_code == 201, answer.json()
    broken = client.put("/api/v1/deployments/ci-qwen/", "model: [unclosed", content_type=YAML)
    assert broken.status_code == 400
    assert "YAML" in broken.json()["detail"]


def test_plan_takes_a_spec_and_says_what_apply_would_do(client, tiny):
    answer = client.post("/api/v1/deployments/plan/", {"name": "ci-qwen", **spec()}, format="json")
    assert answer.status_code == 200, answer.json()
    body = answer.json()
    assert body["result"] == "created"
    assert body["fits"] is True
    assert body["nodes"][0]["logic_ids"] == [0, 1]


def test_a_viewer_cannot_apply(charlie, tiny):
    answer = put(api_client_for(charlie), "ci-qwen", spec())
    assert answer.status_code == 403


def test_models_apply_by_name_without_twins_and_delete_is_refused_while_served(client, tiny):
    body = {"source": "huggingface", "repo_id": "Acme/Other", "description": "first"}
    created = client.put("/api/v1/models/other/", body, format="json")
    assert created.status_code == 201, created.json()
    assert created.json()["result"] == "created"
    same = client.put("/api/v1/models/other/", body, format="json")
    assert (same.status_code, same.json()["result"]) == (200, "unchanged")
    updated = client.put("/api/v1/models/other/", {**body, "description": "second"}, format="json")
    assert (updated.json()["result"], updated.json()["changed"]) == ("updated", ["description"])
    unknown = client.put("/api/v1/models/other/", {**body, "colour": "red"}, format="json")
    assert unknown.status_code == 400
    assert "colour" in unknown.json()["errors"]

    put(client, "ci-qwen", spec())
    refused = client.delete(f"/api/v1/models/{tiny.pk}/")
    assert refused.status_code == 409
    assert "ci-qwen" in refused.json()["detail"]
    other = client.get("/api/v1/models/").json()
    names = [model["name"] for model in other.get("results", other)]
    assert names.count("other") == 1
    assert not any(name.startswith("other-") for name in names)
    other_pk = next(model["id"] for model in other.get("results", other) if model["name"] == "other")
    assert client.delete(f"/api/v1/models/{other_pk}/").status_code == 200


def test_a_spec_naming_only_the_model_serves_its_ready_copy(client, tiny):
    answer = put(client, "model-only", {"model": "tiny-qwen", "placement": {"npus": 1}})
    assert answer.status_code == 201, answer.json()
    assert answer.json()["deployment"]["artifact"] == tiny.artifacts.get().pk
    assert answer.json()["deployment"]["placement"] == [{"node": "npu-a", "npus": [0]}]


def test_a_spec_naming_only_a_model_without_a_copy_on_the_node_says_so(client, tiny):
    from panel.nodes.models import Node

    Node.objects.create(name="empty-node", transport="agent", status="online")
    answer = put(client, "model-only", {"model": "tiny-qwen", "placement": {"node": "empty-node"}})
    assert answer.status_code == 400
    assert "empty-node has no ready copy of tiny-qwen" in answer.json()["errors"]["model"][0]


PODMAN_FACTS = {
    "containers": {
        "engine": "podman",
        "engines": [
            {
                "name": "podman",
                "reachable": True,
                "client": "4.3.1",
                "server": "",
                "error": "",
                "ascend_runtime": "",
                "images": [{"reference": "quay.io/ascend/vllm-ascend:v0.11.0", "id": "0123456789ab"}],
            }
        ],
    },
    "numa_nodes": [{"node": 0, "cpulist": "0-23"}, {"node": 1, "cpulist": "24-47"}],
}


def test_a_container_spec_is_planned_with_its_run_line_and_round_trips(client, tiny, npu_node):
    npu_node.facts = PODMAN_FACTS
    npu_node.versions = {"driver": "25.2.0"}
    npu_node.save()
    body = spec(runtime="container", image="quay.io/ascend/vllm-ascend:v0.11.0")
    answer = put(client, "in-a-box", body)
    assert answer.status_code == 201, answer.json()
    command = answer.json()["plan"]["nodes"][0]["command"]
    assert command.startswith("podman run -d --name ascend-panel-in-a-box ")
    assert "--device /dev/davinci0" in command
    assert "--cpuset-cpus 0-23 --cpuset-mems 0" in command
    assert " quay.io/ascend/vllm-ascend:v0.11.0 " in command
    pk = answer.json()["deployment"]["id"]
    again = client.get(f"/api/v1/deployments/{pk}/?format=spec").json()
    assert (again["runtime"], again["image"]) == ("container", "quay.io/ascend/vllm-ascend:v0.11.0")
    assert put(client, "in-a-box", again).json()["result"] == "unchanged"
    (operation,) = pending("deploy")
    launch = operation.task_kwargs["payload"]
    assert launch["runtime_kind"] == "container"
    assert launch["container"] == {
        "image": "quay.io/ascend/vllm-ascend:v0.11.0",
        "device_ids": [0, 1],
        "host_network": True,
    }


def test_an_image_built_for_another_chip_is_refused_with_the_one_to_use(client, tiny, npu_node):
    npu_node.facts = PODMAN_FACTS
    npu_node.save()
    answer = put(
        client, "wrong-chip", spec(runtime="container", image="quay.io/ascend/vllm-ascend:v0.11.0-a3")
    )
    assert answer.status_code == 400
    errors = answer.json()["errors"]["image"]
    assert "quay.io/ascend/vllm-ascend:v0.11.0 or quay.io/ascend/vllm-ascend:v0.11.0-openeuler" in errors[0]


def test_an_image_the_node_lacks_is_a_warning_not_a_refusal(client, tiny, npu_node):
    npu_node.facts = PODMAN_FACTS
    npu_node.save()
    answer = put(client, "not-pulled", spec(runtime="container", image="quay.io/ascend/vllm-ascend:v0.13.0"))
    assert answer.status_code == 201, answer.json()
    assert "image_not_on_node" in [w["code"] for w in answer.json()["plan"]["warnings"]]
