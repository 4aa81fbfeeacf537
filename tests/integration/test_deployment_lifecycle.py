"""A deployment's whole life with real parts: API → Celery (Redis) → agent task on a simulated A2 host →
the sim engine started through the host's serving venv → probes, logs and metrics → kill -9 noticed and
restarted by the reconcile loop → stop → delete releases the NPUs."""

import os
import signal
import time

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
run_reconcile_loop = pytest.mark.usefixtures("reconcile_loop")


def live_holders(root):
    from workers.sim import state as sim_state

    return sim_state.live_holders(sim_state.load(root))


@pytest.fixture(autouse=True)
def own_ports(settings):
    """Engines of tests running side by side on this machine must not answer each other's probes."""
    settings.PANEL_DEPLOY_BASE_PORT = free_port_pair()


@run_reconcile_loop
def test_a_deployment_runs_restarts_after_kill_stops_and_releases_its_npus(
    celery_worker, node_with_npus, tiny_model, bob, monkeypatch
):
    monkeypatch.setenv("SIM_ENGINE_START_DELAY", "0.5")
    monkeypatch.setenv("SIM_ENGINE_STATS_INTERVAL", "1")
    from panel.catalog.models import Model

    folder, facts = tiny_model
    model = Model.objects.create(name="tiny-llama", facts=facts)
    client = api_client_for(bob)
    body = {
        "name": "tiny",
        "model": model.pk,
        "path": str(folder),
        "nodes": [{"node": TEST_NODE, "npus": [2]}],
    }

    review = client.post("/api/v1/deployments/plan/", body, format="json")
    assert review.status_code == 200, review.json()
    command = review.json()["nodes"][0]["command"]
    assert "ASCEND_RT_VISIBLE_DEVICES=2" in command
    assert "vllm.entrypoints.openai.api_server" in command

    created = client.post("/api/v1/deployments/", body, format="json", HTTP_IDEMPOTENCY_KEY="k-1")
    assert created.status_code == 201, created.json()
    again = client.post("/api/v1/deployments/", body, format="json", HTTP_IDEMPOTENCY_KEY="k-1")
    assert again.status_code == 201
    assert again.json()["id"] == created.json()["id"]
    pk = created.json()["id"]

    running = wait_for(lambda: deployment_json(client, pk)["status"] == "running", 30, "running")
    assert running
    first = deployment_json(client, pk)
    first_pid = first["runtime"]["nodes"][TEST_NODE]["pid"]
    holders = live_holders(celery_worker.sim_root)
    assert [(h["pid"], h["logic_ids"]) for h in holders] == [(first_pid, [2])]

    def started_lines():
        logs = client.get(f"/api/v1/deployments/{pk}/logs/?after_seq=0").json()["results"]
        return any("Application startup complete." in entry["line"] for entry in logs)

    wait_for(started_lines, 10, "the start-up log lines")
    wait_for(lambda: deployment_json(client, pk)["metrics"].get("running") is not None, 15, "engine metrics")
    from panel.accounts.models import ApiToken

    _token, raw = ApiToken.issue(bob, "playground")
    chat = client.post(
        f"/api/v1/deployments/{pk}/chat/",
        {"messages": [{"role": "user", "content": "hello"}], "max_tokens": 4},
        format="json",
        HTTP_AUTHORIZATION=f"Bearer {raw}",
    )
    assert chat.status_code == 200, chat.content
    assert chat.json()["choices"][0]["message"]["content"]

    started = client.post(
        f"/api/v1/deployments/{pk}/benchmarks/",
        {"concurrency": [1, 4], "prompt_len": 16, "output_len": 8, "requests": 4},
        format="json",
    )
    assert started.status_code == 202, started.json()

    def benchmarked():
        runs = client.get("/api/v1/benchmarks/?deployment=tiny").json()["results"]
        return runs and runs[0]["status"] == "succeeded" and runs[0]

    run = wait_for(benchmarked, 30, "the benchmark")
    levels = run["results"]["levels"]
    assert [level["concurrency"] for level in levels] == [1, 4]
    assert all(level["errors"] == 0 and level["ttft_p50_s"] > 0 for level in levels)
    assert levels[0]["output_tokens_per_s"] > 0

    killed_at = time.monotonic()
    os.kill(first_pid, signal.SIGKILL)

    def restarted():
        current = deployment_json(client, pk)
        pid = (current["runtime"].get("nodes") or {}).get(TEST_NODE, {}).get("pid")
        return current["status"] == "running" and pid not in (None, first_pid) and current

    after = wait_for(restarted, 20, "a restarted engine")
    assert after["restart_count"] == 1
    assert time.monotonic() - killed_at < 15

    stopped = client.post(f"/api/v1/deployments/{pk}/stop/")
    assert stopped.status_code == 202
    wait_for(lambda: deployment_json(client, pk)["status"] == "stopped", 30, "stopped")
    assert live_holders(celery_worker.sim_root) == []

    assert client.delete(f"/api/v1/deployments/{pk}/").status_code == 202
    wait_for(lambda: client.get(f"/api/v1/deployments/{pk}/").status_code == 404, 15, "deleted")
    from panel.nodes.models import Npu

    assert not Npu.objects.filter(deployments__isnull=False).exists()


def test_the_planner_refuses_what_does_not_fit_with_field_errors(node_with_npus, tiny_model, bob):
    from panel.catalog.models import Model

    folder, facts = tiny_model
    model = Model.objects.create(name="tiny-llama", facts=facts)
    body = {
        "name": "tp-three",
        "model": model.pk,
        "path": str(folder),
        "nodes": [{"node": TEST_NODE, "npus": [0, 1, 2]}],
        "tensor_parallel_size": 3,
    }
    response = api_client_for(bob).post("/api/v1/deployments/", body, format="json")
    assert response.status_code == 400
    errors = response.json()["errors"]
    assert "tensor_parallel_size" in errors, errors
    assert "divide" in errors["tensor_parallel_size"][0]
    from panel.deployments.models import Deployment

    assert not Deployment.objects.exists()


@run_reconcile_loop
def test_a_failed_start_shows_the_toolkits_findings_and_backs_off(
    celery_worker, node_with_npus, tiny_model, bob, monkeypatch, settings
):
    from panel.catalog.models import Model
    from workers.sim import state as sim_state

    settings.PANEL_DEPLOY_BACKOFF_BASE_S = 60  # the second attempt must wait, not run during the test
    sim_state.set_driver_unloaded(celery_worker.sim_root)
    folder, facts = tiny_model
    model = Model.objects.create(name="tiny-llama", facts=facts)
    client = api_client_for(bob)
    body = {
        "name": "no-driver",
        "model": model.pk,
        "path": str(folder),
        "nodes": [{"node": TEST_NODE, "npus": [0]}],
    }
    pk = client.post("/api/v1/deployments/", body, format="json").json()["id"]

    # The first failed start is tried again at once; the second failure backs off (base 60 s), so the
    # deployment then stays unhealthy. One read per poll: two reads could straddle the retry.
    def failed_twice():
        current = deployment_json(client, pk)
        return current if current["failed_restarts"] == 2 else None

    failed = wait_for(failed_twice, 60, "two failed starts")
    assert failed["status"] == "unhealthy"
    assert "exited during start-up" in failed["reason"]
    assert any("-8005" in line for line in failed["findings"]["log_tail"]), failed["findings"]
    assert failed["next_restart_at"]
    # The failed start left its evidence in the deployment's own log, not only in reason and findings.
    lines = [row["line"] for row in client.get(f"/api/v1/deployments/{pk}/logs/").json()["results"]]
    assert any(line.startswith("[panel] start failed: the engine exited during start-up") for line in lines)
    assert any("-8005" in line for line in lines), lines
    # The reconcile loop probes every second; a probe finding no engine must not cut the back-off short.
    time.sleep(3)
    after_probes = deployment_json(client, pk)
    assert (after_probes["status"], after_probes["failed_restarts"]) == ("unhealthy", 2)
    # Stop it, so the back-off's second attempt does not start an engine after this test has ended.
    assert client.post(f"/api/v1/deployments/{pk}/stop/").status_code == 202


@run_reconcile_loop
def test_a_model_folder_missing_on_the_node_fails_the_start_at_once_saying_so(
    celery_worker, node_with_npus, tiny_model, bob, settings
):
    from panel.catalog.models import Model

    settings.PANEL_DEPLOY_BACKOFF_BASE_S = 60
    _folder, facts = tiny_model
    model = Model.objects.create(name="tiny-llama", facts=facts)
    client = api_client_for(bob)
    body = {
        "name": "no-folder",
        "model": model.pk,
        "path": "/data/models/no-such-tiny-llama",  # inside the models roots, absent on the node
        "nodes": [{"node": TEST_NODE, "npus": [2]}],
    }
    pk = client.post("/api/v1/deployments/", body, format="json").json()["id"]

    def failed_once():
        current = deployment_json(client, pk)
        return current if current["failed_restarts"] else None

    failed = wait_for(failed_once, 30, "the start to fail")
    # Permanent: failed at once, not tried again (the first retry of a transient failure is immediate).
    assert (failed["status"], failed["failed_restarts"], failed["restart_count"]) == ("failed", 1, 0)
    assert failed["next_restart_at"] is None
    from panel.operations.models import Operation

    assert Operation.objects.filter(kind="deploy", target="no-folder").count() == 1
    assert "the model folder /data/models/no-such-tiny-llama does not exist on this node" in failed["reason"]
    lines = [row["line"] for row in client.get(f"/api/v1/deployments/{pk}/logs/").json()["results"]]
    missing = "the model folder /data/models/no-such-tiny-llama does not exist on this node"
    assert f"[panel] start failed: {missing}" in lines
    assert client.post(f"/api/v1/deployments/{pk}/stop/").status_code == 202


@run_reconcile_loop
def test_an_engine_that_dies_at_its_first_request_ends_failed_and_never_running(
    celery_worker, node_with_npus, tiny_model, bob, monkeypatch, settings
):
    """/health answers, /v1/models lists the model, and the first completion kills the engine (a model the
    engine loads but cannot run): the start is not ready, the restart fails the same way, the deployment
    ends failed with the engine's MLA error and its hint."""
    import subprocess
    import sys

    from panel.catalog.models import Model

    monkeypatch.setenv("SIM_ENGINE_START_DELAY", "0.3")
    settings.PANEL_DEPLOY_MAX_RESTARTS = 1
    settings.PANEL_DEPLOY_BACKOFF_BASE_S = 0.5
    fault = [sys.executable, "-m", "workers.sim", "fault", "--root", str(celery_worker.sim_root)]
    subprocess.run([*fault, "--engine-dies-on-first-request"], check=True, capture_output=True)
    folder, facts = tiny_model
    model = Model.objects.create(name="tiny-llama", facts=facts)
    client = api_client_for(bob)
    body = {
        "name": "dies-at-first",
        "model": model.pk,
        "path": str(folder),
        "nodes": [{"node": TEST_NODE, "npus": [1]}],
    }
    created = client.post("/api/v1/deployments/", body, format="json")
    assert created.status_code == 201, created.json()
    pk = created.json()["id"]

    seen = []

    def failed():
        current = deployment_json(client, pk)
        seen.append(current["status"])
        return current["status"] == "failed" and current

    final = wait_for(failed, 60, "the deployment to fail")
    assert "running" not in seen
    assert final["failed_restarts"] == 2
    assert final["reason"].startswith("the engine answered /health, then exited at its first request — ")
    assert "kv_lora_rank + qk_rope_head_dim" in final["reason"]
    assert final["reason"].endswith("Gave up after 1 failed restarts.")
    findings = final["findings"]
    assert [finding["code"] for finding in findings["findings"]] == ["mla_head_dim"]
    assert "Head dimension 320 is not supported by MLA." in findings["findings"][0]["line"]
    assert any("EngineDeadError" in line for line in findings["log_tail"])
    assert live_holders(celery_worker.sim_root) == []
    from workers.engine.running import runtime

    assert runtime.load_record(str(celery_worker.sim_root), "dies-at-first") is None
