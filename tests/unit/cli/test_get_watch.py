"""`get deployments -w` against a local server answering as the panel's `?watch=true` documents: a line per
change (a reconnect's repeats and live figures alone are not changes), a deleted deployment's last line,
the end of a one-deployment watch once it is gone, Ctrl-C as exit 0, and polling a panel without a stream."""

import json

import pytest
import yaml

from panel.cli import client as client_module
from panel.cli import following
from panel.cli.main import main
from tests.unit.cli.api_server import Answer, deployment, page

LIST = "/api/v1/deployments/"
DETAIL = "/api/v1/deployments/7/"


@pytest.fixture(autouse=True)
def quick_polls(monkeypatch):
    monkeypatch.setattr(following, "POLL_S", 0.05)


@pytest.fixture
def interrupt_after(monkeypatch):
    """Ctrl-C once the stream was opened `n` times (the watch reconnects each time the server closes it)."""

    def arm(n: int):
        opened = []
        events = client_module.Client.events

        def counted(self, path, read_timeout, **params):
            opened.append(path)
            if len(opened) > n:
                raise KeyboardInterrupt
            yield from events(self, path, read_timeout, **params)

        monkeypatch.setattr(client_module.Client, "events", counted)
        return opened

    return arm


def embed(**changes):
    return deployment(id=8, name="embed", model_name="bge-m3", npus=[], endpoint="", created=None, **changes)


def test_a_list_watch_prints_a_line_per_change_and_ctrl_c_exits_0(api, capsys, interrupt_after):
    qwen = deployment(created=None)
    api.on(
        "GET",
        LIST,
        Answer(events=[("deployment", qwen), ("deployment", embed(status="starting"))]),
        # After a reconnect the panel sends every object again: only what changed is printed, and a change
        # of the live figures alone (metrics, updated) is none.
        Answer(
            events=[
                ("deployment", {**qwen, "metrics": {"running": 3}, "updated": "2026-01-01T10:05:00Z"}),
                ("deployment", embed(status="running")),
                ("deleted", {"name": "qwen-chat"}),
                ("deleted", {"name": "never-seen"}),
            ]
        ),
    )
    opened = interrupt_after(2)
    assert main(["get", "deployments", "-w"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "NAME       STATUS   MODEL                NPUS                ENDPOINT                  AGE",
        "qwen-chat  running  qwen2.5-7b-instruct  sim-a2:0, sim-a2:1  http://10.0.0.5:18000/v1",
        "embed      starting  bge-m3",
        "embed      running   bge-m3",
        "qwen-chat  deleted   qwen2.5-7b-instruct  sim-a2:0, sim-a2:1  http://10.0.0.5:18000/v1",
    ]
    assert opened == ["/deployments/"] * 3
    assert [r.query for r in api.sent("GET", LIST)] == [{"watch": "true"}] * 2


def test_watching_one_deployment_ends_with_exit_0_once_it_is_deleted(api, capsys):
    api.on("GET", LIST, Answer(200, page(deployment())))
    api.on(
        "GET",
        DETAIL,
        Answer(
            events=[
                ("deployment", deployment(status="stopping")),
                ("deployment", deployment(status="stopped")),
                ("deleted", {"name": "qwen-chat"}),
            ]
        ),
    )
    assert main(["get", "deployments", "qwen-chat", "-w", "-o", "jsonpath={.name} {.status}"]) == 0
    assert capsys.readouterr().out == "qwen-chat stopping\nqwen-chat stopped\nqwen-chat deleted\n"


def test_json_is_one_object_per_line_and_yaml_one_document_per_change(api, capsys):
    api.on("GET", LIST, Answer(200, page(deployment())))
    events = [("deployment", deployment(status="starting")), ("deleted", {"name": "qwen-chat"})]
    api.on("GET", DETAIL, Answer(events=events))
    assert main(["get", "deployments", "qwen-chat", "-w", "-o", "json"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [json.loads(line)["status"] for line in lines] == ["starting", "deleted"]
    assert json.loads(lines[0]) == deployment(status="starting")

    api.on("GET", DETAIL, Answer(events=events))
    assert main(["get", "deployments", "qwen-chat", "-w", "-o", "yaml"]) == 0
    documents = list(yaml.safe_load_all(capsys.readouterr().out))
    assert documents[0] == deployment(status="starting")
    assert documents[1]["status"] == "deleted"


def test_a_panel_without_a_watch_stream_is_polled(api, capsys):
    api.on("GET", LIST, Answer(200, page(deployment())))
    api.on(
        "GET",
        DETAIL,
        Answer(200, deployment(status="running")),  # the answer to ?watch=true: JSON, not a stream
        Answer(200, deployment(status="running")),
        Answer(200, deployment(status="stopping")),
        Answer(404, {"detail": "Not found."}),
    )
    assert main(["get", "deployments", "qwen-chat", "-w", "-o", "name"]) == 0
    assert capsys.readouterr().out == "qwen-chat\nqwen-chat\nqwen-chat\n"  # running, stopping, deleted
    assert [r.query for r in api.sent("GET", DETAIL)] == [{"watch": "true"}, {}, {}, {}]


def test_a_revoked_token_ends_the_watch_with_exit_1(api, capsys):
    api.on(
        "GET", LIST, Answer(events=[("deployment", deployment())]), Answer(401, {"detail": "Invalid token."})
    )
    assert main(["get", "deployments", "-w", "-o", "name"]) == 1
    captured = capsys.readouterr()
    assert captured.out == "qwen-chat\n"
    assert "Invalid token." in captured.err


def test_spec_does_not_go_with_watch(api, capsys):
    assert main(["get", "deployments", "qwen-chat", "-w", "--spec"]) == 2
    assert api.requests == []


def test_a_row_is_printed_only_when_what_it_shows_changed(api, capsys, interrupt_after):
    # A new reason, restart count or age changes no cell a person reads in the table (AGE ticks by itself).
    api.on(
        "GET",
        LIST,
        Answer(
            events=[
                ("deployment", deployment(created="2026-01-01T10:00:00Z")),
                ("deployment", deployment(created="2026-01-01T10:00:00Z", restart_count=2, reason="probe")),
                ("deployment", deployment(created="2026-01-01T09:00:00Z")),
                ("deployment", deployment(created="2026-01-01T10:00:00Z", status="stopping")),
            ]
        ),
    )
    interrupt_after(1)
    assert main(["get", "deployments", "-w"]) == 0
    statuses = [line.split()[1] for line in capsys.readouterr().out.splitlines()[1:]]
    assert statuses == ["running", "stopping"]


def test_a_reconnect_resumes_after_the_last_event_read(api, capsys, interrupt_after):
    api.on(
        "GET",
        LIST,
        Answer(events=[("deployment", deployment(created=None), "s1-1"), ("deployment", embed(), "s1-2")]),
        Answer(events=[("deployment", embed(status="stopping"), "s1-3")]),
    )
    interrupt_after(2)
    assert main(["get", "deployments", "-w", "-o", "name"]) == 0
    first, second = api.sent("GET", LIST)
    assert "Last-Event-ID" not in first.headers
    assert second.headers["Last-Event-ID"] == "s1-2"
