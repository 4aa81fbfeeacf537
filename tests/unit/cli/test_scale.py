"""`scale NAME [--role prefill|decode] REPLICAS` against a local server answering as the API documents: what
it sends (the count, the role, dry run, allow_downtime, its key), what it prints (the change per role and,
on a dry run, what each engine would do), the panel's refusal of a role that does not fit (exit 1), and
`rollout status` of a deployment with roles counting every role's engines."""

import json

import pytest

from panel.cli import waiting
from panel.cli.main import main
from tests.unit.cli.api_server import Answer, deployment, page

LIST = "/api/v1/deployments/"
DETAIL = "/api/v1/deployments/7/"
SCALE = "/api/v1/deployments/7/scale/"

SCALED = {
    "result": "changed",
    "dry_run": False,
    "effect": "scale",
    "changes": [{"field": "replicas", "role": "decode", "from": 1, "to": 3}],
    "deployment": deployment(),
    "warnings": [],
    "steps": [
        {"action": "start", "name": "qwen-chat-d2", "role": "decode"},
        {"action": "start", "name": "qwen-chat-d3", "role": "decode"},
    ],
    "rollout": None,
}


@pytest.fixture(autouse=True)
def quick_polls(monkeypatch):
    monkeypatch.setattr(waiting, "POLL_S", 0.05)


def test_scale_sends_the_role_and_the_count_and_prints_the_change(api, capsys):
    api.on("GET", LIST, Answer(200, page(deployment())))
    api.on("POST", SCALE, Answer(202, SCALED))
    assert main(["scale", "qwen-chat", "--role", "decode", "3", "--idempotency-key", "job-9"]) == 0
    assert capsys.readouterr().out == "qwen-chat: changed: decode replicas (scale)\n"
    (sent,) = api.sent("POST", SCALE)
    assert (sent.body, sent.query) == ({"replicas": 3, "role": "decode"}, {})
    assert sent.headers["Idempotency-Key"] == "job-9"


def test_a_dry_run_prints_each_engine_and_json_prints_the_answer(api, capsys):
    api.on("GET", LIST, Answer(200, page(deployment())))
    api.on("POST", SCALE, Answer(202, {**SCALED, "dry_run": True}))
    assert main(["scale", "qwen-chat", "3", "--role", "decode", "--dry-run", "--allow-downtime"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "qwen-chat: changed: decode replicas (scale) (dry run)",
        "  decode replicas: 1 -> 3",
        "  start qwen-chat-d2 (decode)",
        "  start qwen-chat-d3 (decode)",
    ]
    (sent,) = api.sent("POST", SCALE)
    assert sent.query == {"dry_run": "true", "allow_downtime": "true"}
    assert main(["scale", "qwen-chat", "2", "-o", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["steps"][0]["name"] == "qwen-chat-d2"
    assert api.sent("POST", SCALE)[-1].body == {"replicas": 2, "role": ""}


def test_a_role_the_deployment_does_not_have_exits_1_with_the_panels_sentence(api, capsys):
    api.on("GET", LIST, Answer(200, page(deployment())))
    refused = {
        "detail": "The request is invalid.",
        "errors": {"role": ["qwen-chat runs prefill and decode engines: name the role to scale."]},
    }
    api.on("POST", SCALE, Answer(400, refused))
    assert main(["scale", "qwen-chat", "2"]) == 1
    assert (
        "  role: qwen-chat runs prefill and decode engines: name the role to scale."
        in capsys.readouterr().err
    )


@pytest.mark.parametrize(
    "args", [["qwen-chat", "0"], ["qwen-chat", "two"], ["qwen-chat", "2", "--role", "encode"]]
)
def test_a_count_or_role_argparse_refuses_is_a_usage_error(api, capsys, args):
    with pytest.raises(SystemExit) as exited:
        main(["scale", *args])
    assert exited.value.code == 2
    assert not api.sent("POST", SCALE)


def test_rollout_status_of_a_deployment_with_roles_counts_every_roles_engines(api, capsys):
    rows = [
        {"name": n, "status": "running", "desired_state": "running"} for n in ("qwen-chat-r2", "qwen-chat-d1")
    ]
    with_roles = deployment(replicas_wanted=1, roles_wanted={"prefill": 2, "decode": 1}, replicas=rows)
    api.on("GET", LIST, Answer(200, page(with_roles)))
    api.on("GET", DETAIL, Answer(200, with_roles))
    assert main(["rollout", "status", "qwen-chat", "--timeout", "5s"]) == 0
    assert "3/3 replicas running" in capsys.readouterr().out


def test_rollout_history_names_the_role_a_scale_changed(api, capsys):
    revision = {
        "number": 2,
        "created": "2026-12-06T19:00:00Z",
        "user": "bob",
        "cause": "scale",
        "restored": None,
        "changes": [{"field": "replicas", "role": "decode", "from": 1, "to": 3}],
        "effect": "scale",
        "outcome": "succeeded",
    }
    api.on("GET", LIST, Answer(200, page(deployment())))
    api.on(
        "GET",
        "/api/v1/deployments/7/revisions/",
        Answer(200, {"deployment": "qwen-chat", "results": [revision]}),
    )
    assert main(["rollout", "history", "qwen-chat"]) == 0
    row = capsys.readouterr().out.splitlines()[1]
    assert "decode replicas" in row
    assert "scale" in row


def test_a_refused_scale_of_a_role_the_autoscaler_owns_says_why_and_exits_1(api, capsys):
    said = "qwen-chat's decode engines scale with the load between 1 and 3: the autoscaler owns their count."
    api.on("GET", LIST, Answer(200, page(deployment())))
    api.on("POST", SCALE, Answer(400, {"errors": {"replicas": [said]}}))
    assert main(["scale", "qwen-chat", "--role", "decode", "3"]) == 1
    assert said in capsys.readouterr().err


def test_a_line_about_one_role_names_the_role_once():
    from panel.cli.commands.apply import change_field

    assert change_field({"field": "autoscale", "role": "decode"}) == "decode autoscale"
    owner = {"field": "replicas (autoscaler)", "role": "prefill"}
    assert change_field(owner) == "prefill replicas (autoscaler)"
    named = {"field": "roles.decode.engine.max_model_len", "role": "decode"}
    assert change_field(named) == "roles.decode.engine.max_model_len"
