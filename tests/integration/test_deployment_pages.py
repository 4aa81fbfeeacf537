"""The deployment pages: the wizard step by step (errors named by field, the planner's suggestion and
defaults, the same validation as the API), the deployment page and its actions, who may do what."""

import re

import pytest

from panel.catalog.models import Model, ModelArtifact
from panel.core.domain.choices import DeploymentState, DesiredState, NpuHealth
from panel.deployments.models import Benchmark, Deployment
from panel.nodes.models import Node, Npu
from tests.wizard_steps import SMALL_QWEN, client_for, engine_fields, walk_to_engine_step

pytestmark = pytest.mark.django_db


@pytest.fixture
def node(db):
    node = Node.objects.create(name="a2-node", address="127.0.0.1")
    for npu_id in range(8):
        Npu.objects.create(
            node=node,
            npu_id=npu_id,
            logic_id=npu_id,
            name="910B3",
            health=NpuHealth.OK,
            hbm_total_mb=65536,
            numa_node=0 if npu_id < 4 else 1,
        )
    return node


@pytest.fixture
def artifact(node):
    model = Model.objects.create(name="Qwen/Qwen2.5-0.5B-Instruct", facts=SMALL_QWEN)
    return ModelArtifact.objects.create(model=model, node=node, path="/models/qwen2.5-0.5b", ready=True)


def make_deployment(node, artifact, name="running-one", npus=(0,), state=DeploymentState.RUNNING):
    deployment = Deployment.objects.create(
        name=name,
        model=artifact.model,
        artifact=artifact,
        spec={"port": 8000, "served_model_name": name, "parts": []},
        observed_state=state,
        endpoint="http://127.0.0.1:8000/v1",
    )
    deployment.nodes.set([node])
    deployment.npus.set(node.npus.filter(logic_id__in=npus))
    return deployment


def test_the_placement_step_suggests_one_npu_on_one_numa_node_for_a_small_model(bob, artifact):
    client = client_for(bob)
    client.get("/deployments/new/")
    client.post("/deployments/new/model/", {"artifact": artifact.pk, "name": "qwen-small"})
    page = client.get("/deployments/new/placement/").content.decode()
    assert "TP 1 on a2-node: NPU 0, on NUMA node 0." in page
    checked = re.findall(r'value="(a2-node:\d)"[^>]*\n?[^>]*checked', page)
    assert checked == ["a2-node:0"]


def test_the_suggestion_skips_held_npus_and_shows_who_holds_them(bob, node, artifact):
    make_deployment(node, artifact, name="holder", npus=(0, 1, 2, 3))
    client = client_for(bob)
    client.get("/deployments/new/")
    client.post("/deployments/new/model/", {"artifact": artifact.pk, "name": "qwen-small"})
    page = client.get("/deployments/new/placement/").content.decode()
    assert "NPU 4, on NUMA node 1" in page
    assert page.count('href="/deployments/holder/"') == 4
    assert re.search(r'value="a2-node:0"[^>]*disabled', page)


def test_choosing_a_held_npu_is_refused_with_the_apis_message_on_the_npus_field(bob, node, artifact):
    make_deployment(node, artifact, name="holder", npus=(0,))
    client = client_for(bob)
    client.get("/deployments/new/")
    client.post("/deployments/new/model/", {"artifact": artifact.pk, "name": "qwen-small"})
    # The page never offers a held NPU, so the form refuses it before the planner sees it.
    response = client.post("/deployments/new/placement/", {"npus": ["a2-node:0"]})
    assert response.status_code == 200
    errors = re.search(r'data-testid="error-npus">(.*?)</ul>', response.content.decode(), re.S).group(1)
    assert "NPUs: " in errors


def test_three_npus_give_tp_3_which_the_planner_refuses_on_the_placement_step(bob, artifact):
    client = client_for(bob)
    client.get("/deployments/new/")
    client.post("/deployments/new/model/", {"artifact": artifact.pk, "name": "qwen-small"})
    response = client.post("/deployments/new/placement/", {"npus": ["a2-node:0", "a2-node:1", "a2-node:2"]})
    assert response.status_code == 200
    page = response.content.decode()
    assert "TP 3 does not divide the model&#x27;s 14 attention heads" in page


def test_the_engine_step_is_filled_in_by_the_planner(bob, artifact):
    client = client_for(bob)
    walk_to_engine_step(client, artifact)
    page = client.get("/deployments/new/engine/").content.decode()
    assert re.search(r'<option value="1" selected>1</option>', page)  # TP
    assert 'name="max_model_len" value="32768"' in page
    assert re.search(r'<option value="bfloat16" selected>', page)
    assert 'class="mem-plan"' in page
    assert "--tensor-parallel-size 1" in page


def test_engine_errors_are_named_by_field(bob, artifact):
    client = client_for(bob)
    walk_to_engine_step(client, artifact)
    response = client.post(
        "/deployments/new/engine/",
        engine_fields(extra_flags="--port 9000"),
    )
    assert response.status_code == 200
    page = response.content.decode()
    flags = re.search(r'data-testid="error-extra_flags">(.*?)</ul>', page, re.S).group(1)
    assert "Extra vLLM flags: --port is set by the panel from the plan" in flags
    assert "change the field &#x27;port&#x27;" in flags


def test_a_tp_that_does_not_match_the_chosen_npus_is_an_error_on_the_placement(bob, artifact):
    client = client_for(bob)
    walk_to_engine_step(client, artifact)
    response = client.post("/deployments/new/engine/", engine_fields(tensor_parallel_size="2"))
    assert response.status_code == 200
    page = response.content.decode()
    assert 'data-testid="other-step-errors"' in page
    assert "TP 2 x DP 1 needs 2 NPUs; 1 are available." in page
    tp_error = re.search(r'data-testid="error-tensor_parallel_size">(.*?)</ul>', page, re.S).group(1)
    assert "TP 2 is more than the 1 NPUs of one node" in tp_error


def test_the_planners_warnings_show_beside_the_plan(bob, artifact):
    client = client_for(bob)
    walk_to_engine_step(client, artifact)
    page = client.post("/deployments/new/plan/", engine_fields(max_model_len="40000")).content.decode()
    warnings = re.search(r'data-testid="plan-warnings">(.*?)</ul>', page, re.S).group(1)
    assert "max-model-len 40,000 is longer than the model&#x27;s 32,768 positions" in warnings  # grouped


def test_the_plan_preview_recomputes_for_the_fields_as_typed(bob, artifact):
    client = client_for(bob)
    walk_to_engine_step(client, artifact)
    good = client.post("/deployments/new/plan/", engine_fields(max_model_len="8192")).content.decode()
    assert "--max-model-len 8192" in good
    assert 'data-testid="plan-errors"' not in good
    bad = client.post("/deployments/new/plan/", engine_fields(gpu_memory_utilization="1.5")).content.decode()
    assert 'data-testid="plan-errors"' in bad
    assert "<strong>Memory utilization</strong>" in bad


def test_a_name_in_use_is_refused_on_the_name_field(bob, node, artifact):
    make_deployment(node, artifact, name="taken", npus=(7,))
    client = client_for(bob)
    client.get("/deployments/new/")
    response = client.post("/deployments/new/model/", {"artifact": artifact.pk, "name": "taken"})
    assert response.status_code == 200
    error = re.search(r'data-testid="error-name">(.*?)</ul>', response.content.decode(), re.S).group(1)
    assert "A deployment with this name exists." in error


def test_an_empty_name_is_made_from_the_model_name(bob, artifact):
    client = client_for(bob)
    client.get("/deployments/new/")
    client.post("/deployments/new/model/", {"artifact": artifact.pk, "name": ""})
    assert client.session["deployment_wizard"]["name"] == "qwen2-5-0-5b-instruct"


def test_the_review_deploys_what_it_shows(bob, artifact, django_capture_on_commit_callbacks):
    client = client_for(bob)
    walk_to_engine_step(client, artifact, npus=("a2-node:4",))
    response = client.post("/deployments/new/engine/", engine_fields(max_model_len="8192"))
    assert response["Location"].endswith("/deployments/new/review/")
    review = client.get("/deployments/new/review/").content.decode()
    assert "ASCEND_RT_VISIBLE_DEVICES" in review
    assert "--max-model-len 8192" in review
    with django_capture_on_commit_callbacks(execute=False):
        response = client.post("/deployments/new/review/")
    assert response["Location"] == "/deployments/qwen-small/"
    deployment = Deployment.objects.get(name="qwen-small")
    assert [npu.logic_id for npu in deployment.npus.all()] == [4]
    assert deployment.spec["max_model_len"] == 8192
    assert deployment.created_by == bob
    assert client.session["deployment_wizard"] == {}


def test_a_later_step_cannot_be_opened_before_the_earlier_ones(bob, artifact):
    client = client_for(bob)
    client.get("/deployments/new/")
    assert client.get("/deployments/new/review/")["Location"] == "/deployments/new/model/"


def test_a_viewer_sees_the_pages_but_cannot_deploy_or_stop(charlie, node, artifact):
    deployment = make_deployment(node, artifact)
    client = client_for(charlie)
    listing = client.get("/deployments/").content.decode()
    assert "running-one" in listing
    assert "New deployment" not in listing
    page = client.get("/deployments/running-one/").content.decode()
    assert "http://127.0.0.1:8000/v1/chat/completions" in page  # the curl snippet
    assert 'data-testid="actions"' not in page
    assert 'data-testid="chat-send"' not in page
    assert client.get("/deployments/new/").status_code == 403
    assert client.post("/deployments/new/review/").status_code == 403
    assert client.post("/deployments/running-one/stop/").status_code == 403
    assert client.post("/deployments/running-one/benchmark/", {"concurrency": ["1"]}).status_code == 403
    deployment.refresh_from_db()
    assert deployment.desired_state == DesiredState.RUNNING


def test_an_operator_stops_a_deployment_from_its_page(
    bob, node, artifact, django_capture_on_commit_callbacks
):
    make_deployment(node, artifact)
    client = client_for(bob)
    with django_capture_on_commit_callbacks(execute=False):
        response = client.post("/deployments/running-one/stop/")
    assert response["Location"] == "/deployments/running-one/"
    deployment = Deployment.objects.get(name="running-one")
    assert deployment.desired_state == DesiredState.STOPPED
    assert deployment.observed_state == DeploymentState.STOPPING


def test_benchmark_settings_are_checked_by_the_apis_rules(bob, node, artifact):
    make_deployment(node, artifact)
    client = client_for(bob)
    response = client.post(
        "/deployments/running-one/benchmark/",
        {"concurrency": ["1", "4"], "prompt_len": "0", "output_len": "64", "requests": "8"},
        follow=True,
    )
    page = response.content.decode()
    assert "Prompt length (tokens): Ensure this value is greater than or equal to 1." in page
    assert Benchmark.objects.count() == 0


def test_the_comparison_page_lists_runs_of_several_deployments(charlie, node, artifact):
    for name in ("first", "second"):
        Benchmark.objects.create(
            deployment_name=name,
            model_name="Qwen",
            params={"prompt_len": 128, "output_len": 64},
            status="succeeded",
            results={
                "levels": [{"concurrency": 1, "errors": 0, "ttft_p50_s": 0.0123, "output_tokens_per_s": 50.5}]
            },
        )
    page = client_for(charlie).get("/deployments/benchmarks/").content.decode()
    assert page.count('name="run"') == 2
    assert ">12<" in page  # TTFT in ms
    assert '"label": "first' in page
    assert '"label": "second' in page


def test_a_failed_deployment_shows_its_reason_and_the_toolkits_findings(charlie, node, artifact):
    deployment = make_deployment(node, artifact, name="broken", state=DeploymentState.FAILED)
    deployment.reason = "the engine exited during start-up"
    deployment.runtime = {
        "findings": [
            {
                "code": "hbm_oom",
                "title": "NPU out of memory",
                "hint": "Lower --gpu-memory-utilization or max-model-len, or use more NPUs.",
                "line": "RuntimeError: NPU out of memory. Tried to allocate 2.00 GiB",
                "line_no": 12,
            }
        ]
    }
    deployment.save()
    page = client_for(charlie).get("/deployments/broken/").content.decode()
    findings = re.search(r'data-testid="findings"(.*?)</section>', page, re.S).group(1)
    assert "hidden" not in findings.split(">", 1)[0]
    assert "NPU out of memory" in findings
    assert "Lower --gpu-memory-utilization" in findings
    assert "the engine exited during start-up" in page


def test_the_list_shows_status_colour_npus_restarts_and_reason(charlie, node, artifact):
    deployment = make_deployment(node, artifact, name="flaky", npus=(2, 3), state=DeploymentState.UNHEALTHY)
    deployment.restart_count = 3
    deployment.reason = "/health did not answer 3 times"
    deployment.save()
    page = client_for(charlie).get("/deployments/").content.decode()
    row = re.search(r'<tr data-deployment="flaky">(.*?)</tr>', page, re.S).group(1)
    assert 'class="status status-warning">Unhealthy<' in row
    assert "a2-node: 2,3" in row
    assert '<td class="num">3</td>' in row
    assert "/health did not answer 3 times" in row


# ---- code-loading flags are for admins -----------------------------------------------------------------


def plan_body(artifact, **extra_flags):
    return {
        "name": "remote-code",
        "model": artifact.model_id,
        "artifact": artifact.pk,
        "nodes": [{"node": "a2-node", "npus": [0]}],
        "max_model_len": 4096,
        "extra_flags": extra_flags,
    }


@pytest.mark.parametrize(
    ("flag", "value"),
    [
        ("--trust-remote-code", True),
        ("--chat-template", "/tmp/evil.jinja"),
        ("--tokenizer", "/srv/someone-elses-tokenizer"),
        ("--hf-overrides", {"architectures": ["EvilForCausalLM"]}),
        ("--additional-config", {"torchair_graph_config": {"enabled": True}}),
        ("--compilation-config", {"inductor_passes": {"x": "evil.module.run"}}),
        ("--speculative-config", {"model": "/srv/other-model"}),
    ],
)
def test_an_operator_cannot_make_the_engine_load_code_through_the_api(bob, artifact, flag, value):
    from tests.conftest import api_client_for

    for url in ("/api/v1/deployments/plan/", "/api/v1/deployments/"):
        response = api_client_for(bob).post(url, plan_body(artifact, **{flag: value}), format="json")
        assert response.status_code == 403, response.content
        assert flag in response.json()["detail"]
        assert "Only an admin" in response.json()["detail"]
    assert not Deployment.objects.filter(name="remote-code").exists()


def test_an_operator_may_still_tune_the_engine_and_switch_remote_code_off(bob, artifact):
    from tests.conftest import api_client_for

    body = plan_body(artifact, **{"--max-num-seqs": 64, "--trust-remote-code": False})
    response = api_client_for(bob).post("/api/v1/deployments/plan/", body, format="json")
    assert response.status_code == 200, response.content
    assert "--trust-remote-code" not in response.json()["nodes"][0]["argv"]


def test_an_admin_may_deploy_with_trust_remote_code(alice, artifact):
    from tests.conftest import api_client_for

    body = plan_body(artifact, **{"--trust-remote-code": True, "--chat-template": "/data/models/t.jinja"})
    response = api_client_for(alice).post("/api/v1/deployments/", body, format="json")
    assert response.status_code == 201, response.content
    deployment = Deployment.objects.get(name="remote-code")
    assert deployment.spec["extra_flags"]["--trust-remote-code"] is True


def test_the_wizard_refuses_an_operators_trust_remote_code_on_the_flags_field(bob, artifact):
    client = client_for(bob)
    walk_to_engine_step(client, artifact)
    response = client.post("/deployments/new/engine/", engine_fields(extra_flags="--trust-remote-code"))
    assert response.status_code == 200
    flags = re.search(r'data-testid="error-extra_flags">(.*?)</ul>', response.content.decode(), re.S).group(1)
    assert "Only an admin may set --trust-remote-code" in flags
    # Nor can the review step be reached with it stored in the wizard's state by hand.
    session = client.session
    state = session["deployment_wizard"]
    state["engine"] = {**engine_fields(), "max_model_len": 4096, "extra_flags": {"--trust-remote-code": True}}
    state["engine"].update(tensor_parallel_size=None, data_parallel_size=None, port=None, quantization=None)
    session["deployment_wizard"] = state
    session.save()
    response = client.post("/deployments/new/review/")
    assert "Only an admin may set --trust-remote-code" in response.content.decode()
    assert not Deployment.objects.filter(name="qwen-small").exists()


def test_the_wizard_lets_an_admin_set_trust_remote_code(alice, artifact):
    client = client_for(alice)
    walk_to_engine_step(client, artifact)
    response = client.post("/deployments/new/engine/", engine_fields(extra_flags="--trust-remote-code"))
    assert response.status_code == 302, response.content.decode()[:3000]
    assert "--trust-remote-code" in client.get("/deployments/new/review/").content.decode()
