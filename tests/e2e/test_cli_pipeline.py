"""A CI pipeline through the real `ascend-panel`, against a live panel (web server, worker, beat, a sim
agent), written to the issue 13 contract: plan, apply (dry run, create with --wait, unchanged, change, stop),
the spec round trip, the Idempotency-Key rerun, a failed start, a wait that times out, strict errors,
models by name, delete --wait.

It needs the endpoints of the whole issue (PUT apply and ?dry_run, ?format=spec, ?wait, models PUT and
DELETE by name, strict errors): it fails until they are merged; run it after merging. Its tests run in
file order and share the deployment cli-pipeline, as the steps of one pipeline do:
    .venv/bin/pytest tests/e2e/test_cli_pipeline.py
"""

import json
import uuid

import pytest
import yaml

from tests.integration.cli_live import MODEL, SIM_NODE, Cli, deployment_port, ready_model

NAME = "cli-pipeline"
DOOMED = "cli-pipeline-doomed"
SLOW = "cli-pipeline-slow"


@pytest.fixture(scope="module")
def panel(request):
    panel = request.getfixturevalue("browser_tier_panel")
    with panel.api("bob") as client:
        ready_model(client)
    return panel


@pytest.fixture(scope="module")
def cli(panel, tmp_path_factory):
    cli = Cli(panel.url, tmp_path_factory.mktemp("cli-pipeline") / "config")
    cli.login("bob")
    yield cli
    for name in (NAME, DOOMED, SLOW):  # whatever a failing test left: sim engines are real processes
        cli.run("delete", name, "--wait", "--timeout", "2m", "--ignore-not-found")


@pytest.fixture(scope="module")
def spec(tmp_path_factory):
    """spec(name, **changes) writes a spec file, changed as given, and returns its path. Each deployment
    keeps its port across the module's tests: a new port would be a change of its own."""
    folder = tmp_path_factory.mktemp("specs")
    ports = {}

    def write(name=NAME, max_model_len=1024, **extra):
        port = ports.setdefault(name, deployment_port())
        body = {
            "name": name,
            "model": MODEL,
            "placement": {"node": SIM_NODE, "npus": 1},
            "engine": {"max_model_len": max_model_len, "port": port},
            "runtime": "process",
            **extra,
        }
        path = folder / f"{name}-{uuid.uuid4().hex[:6]}.yaml"
        path.write_text(yaml.safe_dump(body, sort_keys=False))
        return str(path)

    return write


def ok(done, stdout=None):
    assert done.returncode == 0, f"exit {done.returncode}\nstdout: {done.stdout}\nstderr: {done.stderr}"
    if stdout is not None:
        assert done.stdout == stdout, done.stdout
    return done


def deploy_operations(panel, name) -> list[dict]:
    with panel.api("bob") as client:
        found = client.get("/api/v1/operations/", params={"kind": "deploy", "page_size": 1000}).json()
    return [op for op in found["results"] if op["target"] == name]


def test_plan_and_dry_run_show_what_would_happen_and_change_nothing(cli, spec):
    path = spec()
    planned = ok(cli.run("plan", "-f", path))
    assert planned.stdout.startswith(f"{NAME}: fits")
    assert f"  {SIM_NODE} NPUs " in planned.stdout
    review = json.loads(ok(cli.run("plan", "-f", path, "-o", "json")).stdout)
    assert review["fits"] is True

    ok(cli.run("apply", "-f", path, "--dry-run"), f"{NAME}: created (dry run)\n")
    assert cli.run("get", "deployments", NAME).returncode == 1


def test_apply_creates_and_waits_then_a_rerun_with_the_same_key_deploys_nothing_more(cli, spec, panel):
    path = spec()
    key = f"pipeline-{uuid.uuid4().hex}"
    ok(cli.run("apply", "-f", path, "--wait", "--timeout", "3m", "--idempotency-key", key),
       f"{NAME}: created\n{NAME}: running\n")  # fmt: skip
    first = json.loads(ok(cli.run("get", "deployments", NAME, "-o", "json")).stdout)
    assert first["status"] == "running"

    rerun = ok(cli.run("apply", "-f", path, "--wait", ASCEND_PANEL_IDEMPOTENCY_KEY=key))
    assert rerun.stdout.splitlines()[0] in (f"{NAME}: created", f"{NAME}: unchanged")
    again = json.loads(ok(cli.run("get", "deployments", NAME, "-o", "json")).stdout)
    assert again["id"] == first["id"]
    assert len(deploy_operations(panel, NAME)) == 1

    ok(cli.run("apply", "-f", path), f"{NAME}: unchanged\n")


def test_the_spec_round_trips_through_get_and_apply(cli):
    exported = ok(cli.run("get", "deployments", NAME, "--spec")).stdout
    spec = yaml.safe_load(exported)
    assert spec["name"] == NAME
    assert spec["engine"]["max_model_len"] == 1024
    ok(cli.run("apply", "-f", "-", input=exported), f"{NAME}: unchanged\n")


def test_a_change_is_shown_by_a_dry_run_then_rolled_out(cli, spec):
    path = spec(max_model_len=2048)
    dry = ok(cli.run("apply", "-f", path, "--dry-run"))
    # The node has room for a surge replica: the change rolls, the old engine serves until the new one does.
    assert dry.stdout.splitlines() == [
        f"{NAME}: changed: engine.max_model_len (rolling) (dry run)",
        "  engine.max_model_len: 1024 -> 2048",
    ]
    differs = cli.run("diff", "-f", path)
    assert differs.returncode == 1, differs.stderr
    assert "-  max_model_len: 1024\n+  max_model_len: 2048\n" in differs.stdout
    applied = ok(cli.run("apply", "-f", path, "--wait", "--timeout", "3m"))
    assert applied.stdout.splitlines()[0] == f"{NAME}: changed: engine.max_model_len (rolling)"
    ok(cli.run("wait", NAME, "--for", "running", "--timeout", "3m"))  # until the rollout ended
    ok(cli.run("rollout", "status", NAME, "--timeout", "3m"), f"{NAME}: rolled out: 1/1 replicas running\n")
    ok(cli.run("diff", "-f", path), "")
    assert (
        json.loads(cli.run("get", "deployments", NAME, "-o", "json").stdout)["spec"]["max_model_len"] == 2048
    )
    answer = ok(cli.run("chat", NAME, "Say hello", "--max-tokens", "8"))
    assert answer.stdout.strip()


def test_state_stopped_stops_it_and_running_starts_it_again(cli, spec):
    ok(cli.run("apply", "-f", spec(max_model_len=2048, state="stopped"), "--wait"),
       f"{NAME}: changed: state (stop)\n{NAME}: stopped\n")  # fmt: skip
    ok(cli.run("wait", NAME, "--for", "stopped", "--timeout", "10s"), f"{NAME}: stopped\n")
    ok(cli.run("apply", "-f", spec(max_model_len=2048, state="running"), "--wait", "--timeout", "3m"),
       f"{NAME}: changed: state (start)\n{NAME}: running\n")  # fmt: skip


def test_a_model_in_use_cannot_be_removed_and_models_register_by_name_once(cli):
    in_use = cli.run("models", "rm", MODEL)
    assert in_use.returncode == 1
    assert in_use.stderr.startswith("error: ")
    # Added twice by name: one model, no `-2` twin (the demo model's folder is taken, so a hub id).
    ok(cli.run("models", "add", "cli-model", "--repo", "Acme/Cli-Model"))
    ok(cli.run("models", "add", "cli-model", "--repo", "Acme/Cli-Model"))
    assert ok(cli.run("models", "ls", "-o", "name")).stdout.split().count("cli-model") == 1
    assert "cli-model-2" not in cli.run("models", "ls", "-o", "name").stdout.split()
    ok(cli.run("models", "rm", "cli-model"), "cli-model: deleted\n")


def test_strict_errors_name_the_field_and_exit_1(cli, spec):
    unknown = cli.run("apply", "-f", spec(tensor_parallel=4))
    assert unknown.returncode == 1
    assert "tensor_parallel" in unknown.stderr
    container = cli.run("apply", "-f", spec(runtime="container"))
    assert container.returncode == 1
    assert "runtime: " in container.stderr
    too_many = cli.run("apply", "-f", spec(placement={"node": SIM_NODE, "npus": [0, 99]}))
    assert too_many.returncode == 1
    assert "placement.npus: " in too_many.stderr


def test_a_wait_that_runs_out_exits_3_and_wait_picks_it_up(cli, spec):
    slow = cli.run("apply", "-f", spec(name=SLOW), "--wait", "--timeout", "1s")
    assert slow.returncode == 3, slow.stderr
    assert f"{SLOW} did not reach running within" in slow.stderr
    ok(cli.run("wait", SLOW, "--for", "running", "--timeout", "3m"), f"{SLOW}: running\n")
    ok(cli.run("delete", SLOW, "--wait", "--timeout", "2m"), f"{SLOW}: deleted\n")


def test_a_failed_start_exits_1_with_its_findings_and_log(cli, spec, panel):
    root = str(panel.sim_root(SIM_NODE))
    panel.sim("fault", "--root", root, "--driver-unloaded")
    try:
        failed = cli.run("apply", "-f", spec(name=DOOMED), "--wait", "--timeout", "3m")
    finally:
        panel.sim("fault", "--root", root, "--clear")
    assert failed.returncode == 1, failed.stdout + failed.stderr
    assert failed.stderr.startswith("error: ")
    assert "  log tail:" in failed.stderr
    assert "-8005" in failed.stderr
    logs = ok(cli.run("logs", DOOMED))
    assert logs.stdout.strip(), "a failed start has log lines"
    ok(cli.run("delete", DOOMED, "--wait", "--timeout", "2m"), f"{DOOMED}: deleted\n")


def test_delete_waits_until_it_is_gone(cli, panel):
    ok(cli.run("delete", NAME, "--wait", "--timeout", "2m"), f"{NAME}: deleted\n")
    assert cli.run("get", "deployments", NAME).returncode == 1
    with panel.api("bob") as client:
        assert client.get(f"/api/v1/deployments/{NAME}/").status_code == 404
