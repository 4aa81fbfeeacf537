"""`ascend-panel wait` and `delete --wait` against a local server answering as the wait and watch contract
documents: the event stream where the panel has `?watch=true`, polling where it has not; exit 0 when
reached, 1 when the deployment failed, 3 when the timeout ran out."""

import pytest

from panel.cli import waiting
from panel.cli.main import main
from tests.unit.cli.api_server import Answer, deployment, page

LIST = "/api/v1/deployments/"
DETAIL = "/api/v1/deployments/7/"


@pytest.fixture(autouse=True)
def quick_polls(monkeypatch):
    monkeypatch.setattr(waiting, "POLL_S", 0.05)


def listed(**changes):
    return Answer(200, page(deployment(**changes)))


def test_it_follows_the_event_stream_until_running(api, capsys):
    api.on("GET", LIST, listed(status="starting"))
    events = [("deployment", deployment(status="starting")), ("deployment", deployment(status="running"))]
    api.on("GET", DETAIL, Answer(events=events))
    assert main(["wait", "qwen-chat", "--for", "running", "--timeout", "30s"]) == 0
    captured = capsys.readouterr()
    assert captured.out == "qwen-chat: running\n"
    assert captured.err == "qwen-chat: starting\nqwen-chat: running\n"
    (watch,) = api.sent("GET", DETAIL)
    assert watch.query == {"watch": "true"}
    assert watch.headers["Accept"] == "text/event-stream"
    assert api.sent("GET", LIST)[0].query == {"search": "qwen-chat"}


def test_without_watch_it_polls_the_detail(api, capsys):
    api.on("GET", LIST, listed(status="pending"))
    api.on(
        "GET",
        DETAIL,
        Answer(200, deployment(status="starting")),  # the answer to ?watch=true: JSON, so no stream
        Answer(200, deployment(status="starting")),
        Answer(200, deployment(status="running")),
    )
    assert main(["wait", "qwen-chat", "--for", "running", "--timeout", "30s"]) == 0
    assert capsys.readouterr().err.splitlines() == [
        "qwen-chat: pending",
        "qwen-chat: starting",
        "qwen-chat: running",
    ]
    assert [r.query for r in api.sent("GET", DETAIL)] == [{"watch": "true"}, {}, {}]


def test_a_strict_panel_refusing_watch_is_polled_too(api):
    api.on("GET", LIST, listed(status="starting"))
    refused = Answer(400, {"detail": "Unknown query parameter: watch.", "errors": {"watch": ["Unknown."]}})
    api.on("GET", DETAIL, refused, Answer(200, deployment(status="running")))
    assert main(["wait", "qwen-chat", "--for", "running", "--timeout", "30s"]) == 0


def test_a_failed_start_exits_1_at_once_with_its_findings(api, capsys):
    failed = deployment(
        status="failed",
        reason_display="The engine exited with code 1.",
        findings={"findings": [{"code": "hbm_oom", "message": "Out of NPU memory."}], "log_tail": ["oom"]},
    )
    api.on("GET", LIST, listed(status="starting"))
    api.on("GET", DETAIL, Answer(events=[("deployment", failed)]))
    assert main(["wait", "qwen-chat", "--for", "running", "--timeout", "10m"]) == 1
    assert capsys.readouterr().err.splitlines()[-4:] == [
        "error: qwen-chat failed: The engine exited with code 1.",
        "  finding: Out of NPU memory.",
        "  log tail:",
        "    oom",
    ]


def test_unhealthy_after_a_start_it_saw_is_a_failed_start(api, capsys):
    api.on("GET", LIST, listed(status="starting"))
    unhealthy = deployment(status="unhealthy", reason="The engine exited during start-up (exit status 1).")
    api.on("GET", DETAIL, Answer(events=[("deployment", unhealthy)]))
    assert main(["wait", "qwen-chat", "--for", "running"]) == 1
    assert "error: qwen-chat failed: The engine exited during start-up" in capsys.readouterr().err


def test_unhealthy_from_the_outset_may_recover_by_a_restart(api):
    api.on("GET", LIST, listed(status="unhealthy"))
    events = [("deployment", deployment(status="starting")), ("deployment", deployment(status="running"))]
    api.on("GET", DETAIL, Answer(events=[("deployment", deployment(status="unhealthy")), *events]))
    assert main(["wait", "qwen-chat", "--for", "running"]) == 0


def test_it_exits_3_when_the_timeout_runs_out(api, capsys):
    api.on("GET", LIST, listed(status="starting"))
    api.on("GET", DETAIL, Answer(200, deployment(status="starting")))
    assert main(["wait", "qwen-chat", "--for", "running", "--timeout", "0.5s"]) == 3
    assert "qwen-chat did not reach running within 0.5s (it is starting)." in capsys.readouterr().err


def test_waiting_for_running_while_it_is_being_stopped_fails_at_once(api, capsys):
    api.on("GET", LIST, listed(status="stopping", desired_state="stopped"))
    assert main(["wait", "qwen-chat", "--for", "running", "--timeout", "10m"]) == 1
    assert "qwen-chat is being stopped; it will not reach running." in capsys.readouterr().err


def test_deleted_is_reached_by_the_deleted_event(api, capsys):
    api.on("GET", LIST, listed(status="stopping", desired_state="deleted"))
    api.on("GET", DETAIL, Answer(events=[("deleted", {"name": "qwen-chat"})]))
    assert main(["wait", "qwen-chat", "--for", "deleted"]) == 0
    assert capsys.readouterr().out == "qwen-chat: deleted\n"


def test_deleted_is_reached_when_there_is_no_such_deployment(api):
    api.on("GET", LIST, Answer(200, page()))
    assert main(["wait", "qwen-chat", "--for", "deleted"]) == 0


def test_waiting_for_a_deployment_that_does_not_exist_exits_1(api, capsys):
    api.on("GET", LIST, Answer(200, page(deployment(name="qwen-chat-2"))))
    assert main(["wait", "qwen-chat", "--for", "running"]) == 1
    assert "No deployment named 'qwen-chat'." in capsys.readouterr().err


def test_delete_wait_asks_the_panel_to_wait(api, capsys):
    api.on("GET", LIST, listed())
    api.on("DELETE", DETAIL, Answer(200, {"deleted": True, "name": "qwen-chat"}))
    assert main(["delete", "qwen-chat", "--wait", "--timeout", "2m"]) == 0
    assert capsys.readouterr().out == "qwen-chat: deleted\n"
    assert api.sent("DELETE", DETAIL)[0].query == {"wait": "deleted", "timeout": "120"}


def test_delete_wait_that_times_out_exits_3(api, capsys):
    api.on("GET", LIST, listed())
    detail = "qwen-chat did not reach deleted within 120 s (it is stopping)."
    api.on("DELETE", DETAIL, Answer(408, {"detail": detail, "deployment": deployment(status="stopping")}))
    assert main(["delete", "qwen-chat", "--wait", "--timeout", "2m"]) == 3
    assert capsys.readouterr().err == f"error: {detail}\n"


def test_delete_wait_on_a_panel_that_answers_at_once_waits_here(api, capsys):
    api.on("GET", LIST, listed(), listed(status="stopping", desired_state="deleted"))
    api.on("DELETE", DETAIL, Answer(202, {"deleted": False, "name": "qwen-chat"}))
    api.on("GET", DETAIL, Answer(200, deployment(status="stopping")), Answer(404, {"detail": "Not found."}))
    assert main(["delete", "qwen-chat", "--wait"]) == 0
    assert capsys.readouterr().out == "qwen-chat: deleted\n"


def test_delete_without_wait_says_it_is_deleting(api, capsys):
    api.on("GET", LIST, listed())
    api.on("DELETE", DETAIL, Answer(202, {"deleted": False, "name": "qwen-chat"}))
    assert main(["delete", "qwen-chat"]) == 0
    assert capsys.readouterr().out == "qwen-chat: deleting\n"
    assert api.sent("DELETE", DETAIL)[0].query == {}


def test_deleting_what_is_not_there_exits_1_unless_told_to_ignore_it(api, capsys):
    api.on("GET", LIST, Answer(200, page()))
    assert main(["delete", "qwen-chat"]) == 1
    assert main(["delete", "qwen-chat", "--ignore-not-found"]) == 0
    assert api.sent("DELETE", DETAIL) == []


def test_a_dropped_stream_is_resumed_after_the_last_event_read(api, capsys):
    api.on("GET", LIST, listed(status="starting"))
    api.on(
        "GET",
        DETAIL,
        Answer(events=[("deployment", deployment(status="starting"), "s9-4")]),
        Answer(events=[("deployment", deployment(status="running"), "s9-5")]),
    )
    assert main(["wait", "qwen-chat", "--for", "running", "--timeout", "30s"]) == 0
    first, second = api.sent("GET", DETAIL)
    assert "Last-Event-ID" not in first.headers
    assert second.headers["Last-Event-ID"] == "s9-4"
