"""`ascend-panel wait --for running` and `get` with a rolling update (docs/deployment-spec.md): the wait
lasts until the rollout has ended and fails when it failed; `get` shows the replicas and the progress."""

import pytest

from panel.cli import waiting
from panel.cli.commands.deployments import status_text
from panel.cli.main import main
from tests.unit.cli.api_server import Answer, deployment, page

LIST = "/api/v1/deployments/"
DETAIL = "/api/v1/deployments/7/"


@pytest.fixture(autouse=True)
def quick_polls(monkeypatch):
    monkeypatch.setattr(waiting, "POLL_S", 0.05)


def rolling(status, done, phase, message="m"):
    return {"status": status, "phase": phase, "done": done, "total": 2, "message": message}


def test_wait_for_running_lasts_until_the_rollout_succeeded(api, capsys):
    first = deployment(status="running", rollout=rolling("running", 0, "surge", "qwen-chat-r3 starts"))
    api.on("GET", LIST, Answer(200, page(first)))
    api.on(
        "GET",
        DETAIL,
        Answer(200, first),
        Answer(200, deployment(status="running", rollout=rolling("running", 1, "replace", "r2 next"))),
        Answer(200, deployment(status="running", rollout=rolling("succeeded", 2, "done"))),
    )
    assert main(["wait", "qwen-chat", "--for", "running", "--timeout", "30s"]) == 0
    err = capsys.readouterr().err
    assert "rolling 0/2: qwen-chat-r3 starts" in err
    assert "rolling 1/2: r2 next" in err
    assert len(api.sent("GET", DETAIL)) == 3


def test_wait_for_running_fails_when_the_rollout_failed(api, capsys):
    first = deployment(status="running", rollout=rolling("running", 0, "surge"))
    api.on("GET", LIST, Answer(200, page(first)))
    failed = rolling("failed", 0, "surge", "The new launch did not start on qwen-chat-r3.")
    api.on("GET", DETAIL, Answer(200, first), Answer(200, deployment(status="running", rollout=failed)))
    assert main(["wait", "qwen-chat", "--for", "running", "--timeout", "30s"]) == 1
    assert "did not start on qwen-chat-r3" in capsys.readouterr().err


def test_an_old_failed_rollout_does_not_fail_a_later_wait(api):
    old = deployment(status="running", rollout=rolling("failed", 0, "surge"))
    api.on("GET", LIST, Answer(200, page(old)))
    api.on("GET", DETAIL, Answer(200, old))
    assert main(["wait", "qwen-chat", "--for", "running", "--timeout", "30s"]) == 0


def test_get_shows_replicas_running_and_the_rollout():
    row = {
        "status": "running",
        "replicas": [{"name": "q-r2", "status": "running"}, {"name": "q-r3", "status": "starting"}],
        "rollout": rolling("running", 1, "replace"),
    }
    assert status_text(row) == "running 2/3 (rolling 1/2: replace)"
    assert status_text({"status": "stopped", "replicas": [], "rollout": None}) == "stopped"
