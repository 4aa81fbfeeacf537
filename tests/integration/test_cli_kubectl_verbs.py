"""`diff`, `rollout status`, `rollout undo`, `describe` and `get -w` as the CLI runs them (main(), in this
process) against a real web server (tests/live_web.py): the panel's own dry run, rollback, operations and
event stream. No agent: launches and stops are finished the way the ingest finishes them, and the
reconcile tick moves rollouts on, in a thread beside the command that waits."""

import json
import threading
import time

import pytest
import yaml

from panel.cli.main import main
from tests.integration.test_deployment_apply import (  # noqa: F401  (fixtures)
    client,
    npu_node,
    put,
    running,
    spec,
    tiny,
)
from tests.live_web import point_cli_at

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(300)]

NAME = "ci-qwen"


@pytest.fixture
def cli(live_web, bob, monkeypatch, tmp_path):
    point_cli_at(live_web, bob, monkeypatch, tmp_path)


@pytest.fixture
def spec_file(tmp_path):
    def write(**engine) -> str:
        path = tmp_path / f"{NAME}.yaml"
        path.write_text(yaml.safe_dump({"name": NAME, **spec(engine={"max_model_len": 2048, **engine})}))
        return str(path)

    return write


@pytest.fixture
def panel_loop():
    """What the agents and the beat would do, every 0.2 s while a command waits: finish every pending launch
    and stop, and run the reconcile tick (which moves rollouts on)."""
    from django.db import close_old_connections

    from panel.deployments.rollouts.reconcile import tick
    from tests.integration.test_deployment_replicas import settle

    stop = threading.Event()

    def loop():
        while not stop.is_set():
            try:
                settle()
                tick()
            finally:
                close_old_connections()
            stop.wait(0.2)

    thread = threading.Thread(target=loop, daemon=True)
    yield thread.start
    stop.set()
    thread.join(10)


def test_diff_apply_rollout_and_undo(cli, client, tiny, spec_file, panel_loop, capsys):  # noqa: F811
    # Not there yet: everything is new, exit 1.
    assert main(["diff", "-f", spec_file()]) == 1
    out = capsys.readouterr().out
    assert out.startswith(f"--- live/{NAME}\n+++ merged/{NAME}\n")
    assert f"+name: {NAME}\n" in out
    assert "+  max_model_len: 2048\n" in out

    assert main(["apply", "-f", spec_file()]) == 0
    running(NAME)
    capsys.readouterr()
    assert main(["diff", "-f", spec_file()]) == 0  # what the diff showed is what was made
    assert capsys.readouterr().out == ""

    assert main(["diff", "-f", spec_file(max_model_len=4096)]) == 1
    out = capsys.readouterr().out
    assert "-  max_model_len: 2048\n+  max_model_len: 4096\n" in out
    assert [line[0] for line in out.splitlines()[3:] if line[:1] in "+-"] == ["-", "+"]  # nothing else

    assert main(["apply", "-f", spec_file(max_model_len=4096)]) == 0
    assert capsys.readouterr().out == f"{NAME}: changed: engine.max_model_len (rolling)\n"
    panel_loop()
    assert main(["rollout", "status", NAME, "--timeout", "2m"]) == 0
    captured = capsys.readouterr()
    assert captured.out == f"{NAME}: rolled out: 1/1 replicas running\n"
    assert f"{NAME}: rolling update, 0/1 replaced: " in captured.err

    assert main(["describe", "deployment", NAME]) == 0
    described = capsys.readouterr().out
    assert f"Name:          {NAME}" in described
    assert "    max_model_len: 4096" in described  # its spec
    assert "Placement:\n  NODE   NPUS (LOGIC IDS)  NPU IDS\n  npu-a  0, 1              0, 1\n" in described
    assert " succeeded, 1/1 replaced" in described.split("Rollout: ")[1]
    operations = described.split("Recent operations:\n")[1].splitlines()
    assert operations[0].split()[:2] == ["AGE", "KIND"]
    assert {"deploy"} <= {
        line.split()[1] for line in operations[1:] if line.startswith("  ") and len(line.split()) > 2
    }

    assert main(["rollout", "undo", NAME, "--dry-run"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        f"{NAME}: changed: engine.max_model_len (rolling) (dry run)",
        "  engine.max_model_len: 4096 -> 2048",
    ]
    assert main(["rollout", "undo", NAME]) == 0
    assert capsys.readouterr().out == f"{NAME}: changed: engine.max_model_len (rolling)\n"
    assert main(["rollout", "status", NAME, "--timeout", "2m"]) == 0
    capsys.readouterr()
    assert main(["get", "deployments", NAME, "--spec", "-o", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["engine"]["max_model_len"] == 2048
    assert main(["diff", "-f", spec_file()]) == 0  # back where the file says


def test_get_watch_prints_each_change_until_the_deployment_is_gone(cli, client, tiny, panel_loop, capsys):  # noqa: F811
    assert put(client, NAME, spec()).status_code == 201
    done = {}
    watcher = threading.Thread(
        target=lambda: done.setdefault(
            "exit", main(["get", "deployments", NAME, "-w", "-o", "jsonpath={.status}"])
        ),
        daemon=True,
    )
    watcher.start()
    printed: list[str] = []
    deadline = time.monotonic() + 30
    while not printed and time.monotonic() < deadline:
        time.sleep(0.2)
        printed += capsys.readouterr().out.splitlines()
    panel_loop()  # the launch finishes: running
    while "running" not in printed and time.monotonic() < deadline:
        time.sleep(0.2)
        printed += capsys.readouterr().out.splitlines()
    assert client.delete(f"/api/v1/deployments/{NAME}/").status_code == 202
    watcher.join(60)
    assert done.get("exit") == 0
    printed += capsys.readouterr().out.splitlines()
    # Each state once, as it changed (a stop may end before the stream reads it: `stopping` may be missed).
    assert printed[:2] == ["starting", "running"], printed
    assert printed[-1] == "deleted"
    assert set(printed[2:-1]) <= {"stopping"}


def test_describe_node_shows_who_holds_its_npus(cli, client, tiny, capsys):  # noqa: F811
    assert put(client, NAME, spec()).status_code == 201
    assert main(["describe", "node", "npu-a"]) == 0
    out = capsys.readouterr().out
    npus = out.split("NPUs:\n")[1].split("Deployments:")[0].splitlines()
    assert npus[0].split()[:2] == ["LOGIC", "NPU"]
    held = {line.split()[0]: line.split()[-1] for line in npus[1:]}
    assert held["0"] == held["1"] == NAME
    assert f"  {NAME}  " in out.split("Deployments:\n")[1]
