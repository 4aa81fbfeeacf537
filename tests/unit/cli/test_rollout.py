"""`rollout status` and `rollout undo` against a local server answering as the API documents: done once
every replica of the spec runs and no rolling update is under way (0), failed (1), timed out (3); the
rollback call, its dry run, its key, and what an older panel without it answers."""

import json
import time

import pytest

from panel.cli import waiting
from panel.cli.main import main
from tests.unit.cli.api_server import Answer, deployment, page

LIST = "/api/v1/deployments/"
DETAIL = "/api/v1/deployments/7/"
ROLLBACK = "/api/v1/deployments/7/rollback/"


@pytest.fixture(autouse=True)
def quick_polls(monkeypatch):
    monkeypatch.setattr(waiting, "POLL_S", 0.05)


def rollout(status, done=0, message="m", total=2):
    return {"id": 4, "status": status, "phase": "surge", "done": done, "total": total, "message": message}


def replica(name, status="running", desired="running"):
    return {"name": name, "status": status, "desired_state": desired}


def states(api, first, *later):
    """The deployment as the list finds it, then as the detail answers in turn (no stream: polled)."""
    api.on("GET", LIST, Answer(200, page(first)))
    api.on("GET", DETAIL, *[Answer(200, d) for d in (first, *later)])


def test_status_waits_until_the_rollout_succeeded_and_every_replica_runs(api, capsys):
    two = {"replicas_wanted": 2}
    states(
        api,
        deployment(
            **two, rollout=rollout("running", 0, "qwen-chat-r3 starts"), replicas=[replica("qwen-chat-r2")]
        ),
        deployment(
            **two,
            rollout=rollout("running", 1, "qwen-chat-r2 next"),
            replicas=[replica("qwen-chat-r2"), replica("qwen-chat-r3", "starting")],
        ),
        # Done, but the surge is still there: three rows for a spec of two.
        deployment(
            **two,
            rollout=rollout("succeeded", 2),
            replicas=[replica("qwen-chat-r2"), replica("qwen-chat-r3")],
        ),
        deployment(**two, rollout=rollout("succeeded", 2), replicas=[replica("qwen-chat-r2")]),
    )
    assert main(["rollout", "status", "qwen-chat", "--timeout", "30s"]) == 0
    captured = capsys.readouterr()
    assert captured.out == "qwen-chat: rolled out: 2/2 replicas running\n"
    assert captured.err.splitlines() == [
        "qwen-chat: rolling update, 0/2 replaced: qwen-chat-r3 starts",
        "qwen-chat: rolling update, 1/2 replaced: qwen-chat-r2 next",
        "qwen-chat: running, 3/2 replicas running (1 more to remove)",
        "qwen-chat: running, 2/2 replicas running",
    ]


def test_status_of_a_deployment_that_runs_is_done_at_once(api, capsys):
    states(api, deployment(replicas_wanted=1, replicas=[], rollout=None))
    assert main(["rollout", "status", "qwen-chat"]) == 0
    assert capsys.readouterr().out == "qwen-chat: rolled out: 1/1 replicas running\n"


def test_status_of_a_stopped_spec_is_done_once_stopped(api, capsys):
    states(
        api,
        deployment(status="stopping", desired_state="stopped", replicas_wanted=1),
        deployment(status="stopped", desired_state="stopped", replicas_wanted=1),
    )
    assert main(["rollout", "status", "qwen-chat"]) == 0
    assert capsys.readouterr().out == "qwen-chat: rolled out: 1/1 replicas stopped\n"


def test_a_failed_rolling_update_exits_1_and_says_the_old_replicas_serve_on(api, capsys):
    states(
        api,
        deployment(rollout=rollout("running")),
        deployment(rollout=rollout("failed", message="The new launch did not start on qwen-chat-r3.")),
    )
    assert main(["rollout", "status", "qwen-chat"]) == 1
    err = capsys.readouterr().err
    assert "error: qwen-chat: the rolling update failed: The new launch did not start on qwen-chat-r3." in err
    assert "rollout undo" in err


def test_a_start_that_ends_unhealthy_exits_1_with_its_findings(api, capsys):
    findings = {
        "findings": [{"message": "The driver is not loaded.", "hint": "Load it."}],
        "log_tail": ["-8005"],
    }
    states(
        api,
        deployment(status="starting"),
        deployment(status="unhealthy", reason_display="It exited during start-up.", findings=findings),
    )
    assert main(["rollout", "status", "qwen-chat"]) == 1
    err = capsys.readouterr().err
    assert "error: qwen-chat is unhealthy: It exited during start-up." in err
    assert "  finding: The driver is not loaded." in err
    assert "    -8005" in err


def test_a_failed_replica_exits_1_naming_it(api, capsys):
    states(api, deployment(replicas_wanted=2, replicas=[replica("qwen-chat-r2", "failed")]))
    assert main(["rollout", "status", "qwen-chat"]) == 1
    assert "its replica qwen-chat-r2 is failed" in capsys.readouterr().err


def test_status_times_out_with_exit_3(api, capsys):
    states(api, deployment(status="starting"))
    assert main(["rollout", "status", "qwen-chat", "--timeout", "0.3"]) == 3
    assert "did not finish within 0.3s (starting, 0/1 replicas running)" in capsys.readouterr().err


def test_status_times_out_on_a_stream_that_only_keeps_alive(api, capsys, monkeypatch):
    """The panel sends a keepalive every 15 s, so the stream's read timeout never fires: the keepalives
    themselves must let the wait see its deadline pass."""
    from panel.cli import client as client_module

    def quiet_stream(self, path, read_timeout, **params):
        yield "deployment", deployment(status="starting")
        while True:
            time.sleep(0.05)
            yield client_module.KEEPALIVE, {}

    monkeypatch.setattr(client_module.Client, "events", quiet_stream)
    api.on("GET", LIST, Answer(200, page(deployment(status="starting"))))
    began = time.monotonic()
    assert main(["rollout", "status", "qwen-chat", "--timeout", "0.5"]) == 3
    assert time.monotonic() - began < 5
    assert "did not finish within" in capsys.readouterr().err


def test_keepalive_comments_are_handed_on():
    from panel.cli.client import KEEPALIVE, _parse_events

    lines = [
        "retry: 3000",
        "",
        ": keepalive",
        "",
        "event: deployment",
        'data: {"name": "x"}',
        "",
        ": keepalive",
    ]
    assert list(_parse_events(iter(lines))) == [
        (KEEPALIVE, {}),
        ("deployment", {"name": "x"}),
        (KEEPALIVE, {}),
    ]


def test_status_of_a_deployment_being_deleted_exits_1(api, capsys):
    states(api, deployment(desired_state="deleted", status="stopping"))
    assert main(["rollout", "status", "qwen-chat"]) == 1
    assert "is being deleted" in capsys.readouterr().err


UNDONE = {
    "result": "changed",
    "dry_run": False,
    "effect": "rolling",
    "changes": [{"field": "engine.max_model_len", "from": 4096, "to": 2048}],
    "deployment": deployment(),
    "warnings": [{"level": "warning", "message": "Room for 3 sequences."}],
    "rollout": rollout("running"),
}


def test_undo_posts_the_rollback_and_prints_what_it_changes(api, capsys):
    api.on("GET", LIST, Answer(200, page(deployment())))
    api.on("POST", ROLLBACK, Answer(202, UNDONE))
    assert main(["rollout", "undo", "qwen-chat", "--idempotency-key", "job-7"]) == 0
    captured = capsys.readouterr()
    assert captured.out == "qwen-chat: changed: engine.max_model_len (rolling)\n"
    assert captured.err == "warning: qwen-chat: Room for 3 sequences.\n"
    (sent,) = api.sent("POST", ROLLBACK)
    assert (sent.query, sent.headers["Idempotency-Key"]) == ({}, "job-7")


def test_undo_dry_run_shows_the_diff_and_json_prints_the_answer(api, capsys):
    api.on("GET", LIST, Answer(200, page(deployment())))
    api.on("POST", ROLLBACK, Answer(202, {**UNDONE, "dry_run": True, "warnings": []}))
    assert main(["rollout", "undo", "qwen-chat", "--dry-run"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "qwen-chat: changed: engine.max_model_len (rolling) (dry run)",
        "  engine.max_model_len: 4096 -> 2048",
    ]
    assert api.sent("POST", ROLLBACK)[0].query == {"dry_run": "true"}
    assert main(["rollout", "undo", "qwen-chat", "--dry-run", "-o", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["effect"] == "rolling"


def test_undo_without_an_earlier_spec_exits_1_with_the_panels_sentence(api, capsys):
    api.on("GET", LIST, Answer(200, page(deployment())))
    refused = {
        "detail": "The request is invalid.",
        "errors": {"previous_spec": ["qwen-chat has no earlier spec to roll back to."]},
    }
    api.on("POST", ROLLBACK, Answer(400, refused))
    assert main(["rollout", "undo", "qwen-chat"]) == 1
    assert "  previous_spec: qwen-chat has no earlier spec to roll back to." in capsys.readouterr().err


def test_undo_on_a_panel_without_rollback_says_so(api, capsys):
    api.on("GET", LIST, Answer(200, page(deployment())))
    assert main(["rollout", "undo", "qwen-chat"]) == 1
    assert "This panel has no rollback" in capsys.readouterr().err
