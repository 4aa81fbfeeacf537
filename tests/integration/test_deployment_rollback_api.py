"""What `ascend-panel diff`, `rollout undo` and `describe` read from the API: a dry run of apply answers the
spec the deployment would have (its own when unchanged, so a diff and apply agree); `POST …/rollback/`
applies the previous spec as the page's Roll back does (dry run, twice returns, none to go back to, who
may); operations filter by target. Agents are not involved: launches finish as the ingest finishes them."""

import pytest

from panel.nodes.models import Node
from tests.conftest import api_client_for
from tests.integration.test_deployment_apply import (  # noqa: F401  (fixtures)
    client,
    npu_node,
    put,
    running,
    spec,
    tiny,
)

pytestmark = pytest.mark.django_db


def live_spec(api, name):
    answer = api.get(f"/api/v1/deployments/{name}/?format=spec")
    assert answer.status_code == 200, answer.content
    return answer.json()


def test_a_dry_run_answers_the_spec_it_would_make(client, tiny):  # noqa: F811
    created = put(client, "ci-qwen", spec(), dry_run="true").json()
    assert created["result"] == "created"
    assert created["spec"]["placement"] == {"node": "npu-a", "npus": [0, 1]}
    assert created["spec"]["engine"]["max_model_len"] == 2048

    assert put(client, "ci-qwen", spec()).status_code == 201
    running("ci-qwen")
    assert created["spec"] == live_spec(client, "ci-qwen")  # what the dry run said is what was made

    unchanged = put(client, "ci-qwen", spec(), dry_run="true").json()
    assert (unchanged["result"], unchanged["spec"]) == ("unchanged", live_spec(client, "ci-qwen"))

    changed = put(client, "ci-qwen", spec(engine={"max_model_len": 4096}, replicas=2), dry_run="true").json()
    assert changed["result"] == "changed"
    after = changed["spec"]
    before = live_spec(client, "ci-qwen")
    assert after["engine"] == {**before["engine"], "max_model_len": 4096}
    assert after["replicas"] == 2
    assert after["placement"] == {"node": "npu-a", "npus": 2}  # replicas take a count each, as spec_of says
    assert {key: value for key, value in after.items() if key not in ("engine", "replicas", "placement")} == {
        key: value for key, value in before.items() if key not in ("engine", "replicas", "placement")
    }
    # The real apply answers no spec: the deployment is there to be read.
    assert put(client, "ci-qwen", spec(engine={"max_model_len": 4096})).json()["spec"] is None


def test_a_dry_run_of_a_folder_not_registered_yet_answers_no_spec(client, tiny):  # noqa: F811
    # Under a models root of the node: a folder registering would refuse, a dry run refuses too.
    Node.objects.filter(name="npu-a").update(models_roots=["/models"])
    answer = put(
        client,
        "ci-new",
        {"path": "/models/unknown", "placement": {"node": "npu-a", "npus": 1}},
        dry_run="true",
    )
    assert answer.status_code == 201, answer.json()
    assert answer.json()["spec"] is None


def test_rollback_applies_the_previous_spec_and_twice_returns(client, tiny):  # noqa: F811
    assert put(client, "ci-qwen", spec(state="stopped")).status_code == 201
    assert put(client, "ci-qwen", spec(state="stopped", engine={"max_model_len": 4096})).status_code == 202

    dry = client.post("/api/v1/deployments/ci-qwen/rollback/?dry_run=true")
    assert dry.status_code == 202, dry.json()
    body = dry.json()
    assert (body["result"], body["dry_run"]) == ("changed", True)
    assert {"field": "engine.max_model_len", "from": 4096, "to": 2048} in body["changes"]
    assert body["spec"]["engine"]["max_model_len"] == 2048
    assert live_spec(client, "ci-qwen")["engine"]["max_model_len"] == 4096  # the dry run changed nothing

    undone = client.post("/api/v1/deployments/ci-qwen/rollback/")
    assert undone.status_code == 202, undone.json()
    assert undone.json()["deployment"]["spec"]["max_model_len"] == 2048
    assert live_spec(client, "ci-qwen")["engine"]["max_model_len"] == 2048

    again = client.post("/api/v1/deployments/ci-qwen/rollback/")
    assert again.status_code == 202
    assert live_spec(client, "ci-qwen")["engine"]["max_model_len"] == 4096


def test_rollback_of_a_serving_deployment_rolls_once_the_change_has_rolled(client, tiny):  # noqa: F811
    from tests.integration.test_deployment_replicas import advance, settle

    put(client, "ci-qwen", spec())
    running("ci-qwen")
    assert put(client, "ci-qwen", spec(engine={"max_model_len": 4096})).status_code == 202
    # While that change rolls, a rollback is refused as an apply would be.
    refused = client.post("/api/v1/deployments/ci-qwen/rollback/")
    assert refused.status_code == 409
    assert "rolling update" in refused.json()["detail"]
    for _round in range(20):
        settle()
        if advance().status != "running":
            break
    undone = client.post("/api/v1/deployments/ci-qwen/rollback/")
    assert undone.status_code == 202, undone.json()
    body = undone.json()
    assert (body["effect"], body["rollout"]["status"]) == ("rolling", "running")
    assert {"field": "engine.max_model_len", "from": 4096, "to": 2048} in body["changes"]


def test_rollback_with_nothing_to_go_back_to_is_a_400_naming_it(client, tiny):  # noqa: F811
    put(client, "ci-qwen", spec(state="stopped"))
    answer = client.post("/api/v1/deployments/ci-qwen/rollback/")
    assert answer.status_code == 400
    assert "no earlier spec" in str(answer.json()["errors"]["previous_spec"])


def test_a_viewer_may_not_roll_back(client, tiny, charlie):  # noqa: F811
    put(client, "ci-qwen", spec(state="stopped"))
    put(client, "ci-qwen", spec(state="stopped", engine={"max_model_len": 4096}))
    assert api_client_for(charlie).post("/api/v1/deployments/ci-qwen/rollback/").status_code == 403
    assert live_spec(client, "ci-qwen")["engine"]["max_model_len"] == 4096


def test_a_retried_rollback_with_its_key_rolls_back_once(client, tiny):  # noqa: F811
    put(client, "ci-qwen", spec(state="stopped"))
    put(client, "ci-qwen", spec(state="stopped", engine={"max_model_len": 4096}))
    first = client.post("/api/v1/deployments/ci-qwen/rollback/", HTTP_IDEMPOTENCY_KEY="job-1")
    retry = client.post("/api/v1/deployments/ci-qwen/rollback/", HTTP_IDEMPOTENCY_KEY="job-1")
    assert first.status_code == retry.status_code == 202
    assert retry["Idempotent-Replay"] == "true"
    assert live_spec(client, "ci-qwen")["engine"]["max_model_len"] == 2048  # not back to 4096


def test_operations_filter_by_target(client, tiny):  # noqa: F811
    put(client, "ci-qwen", spec())
    put(client, "other", spec(placement={"node": "npu-a", "npus": [2]}))
    listed = client.get("/api/v1/operations/?target=ci-qwen").json()["results"]
    assert [(op["kind"], op["target"]) for op in listed] == [("deploy", "ci-qwen")]
