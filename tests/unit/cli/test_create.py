"""`create token` and `create key` against a local server answering as POST /api/v1/tokens/ documents: what
they send (name, scopes, models, limits, expiry) and that the raw token is printed once, alone on stdout."""

import json
from datetime import UTC, datetime, timedelta

import pytest

from panel.cli.commands.create import expiry
from panel.cli.errors import UsageError
from panel.cli.main import main
from tests.unit.cli.api_server import Answer, deployment, page

TOKENS = "/api/v1/tokens/"


def issued(**fields) -> dict:
    return {"id": 9, "name": "ci", "prefix": "ap_abcdefg", "created": "2026-01-01T10:00:00Z",
            "expires": None, "last_used": None, "revoked": None, "usable": True, "scopes": ["admin"],
            "models": [], "requests_per_minute": None, "tokens_per_minute": None,
            "token": "ap_abcdefg_secret", **fields}  # fmt: skip


def test_create_token_prints_the_token_alone_and_what_it_is_on_stderr(api, capsys):
    api.on("POST", TOKENS, Answer(201, issued(scopes=["deploy"])))
    assert main(["create", "token", "ci", "--scope", "deploy"]) == 0
    captured = capsys.readouterr()
    assert captured.out == "ap_abcdefg_secret\n"
    assert captured.err == (
        "Created token ci (ap_abcdefg…; scopes: deploy; does not expire). It is shown once: store it now.\n"
    )
    (sent,) = api.sent("POST", TOKENS)
    assert sent.body == {"name": "ci", "scopes": ["deploy"]}


def test_create_token_without_scope_asks_for_nothing_more_than_its_name(api, capsys):
    api.on("POST", TOKENS, Answer(201, issued()))
    assert main(["create", "token", "ci"]) == 0
    assert api.sent("POST", TOKENS)[0].body == {"name": "ci"}


def test_expires_is_sent_as_a_time_with_its_offset(api, capsys):
    api.on("POST", TOKENS, Answer(201, issued(expires="2027-01-31T00:00:00Z")))
    before = datetime.now(UTC)
    assert (
        main(["create", "token", "ci", "--expires", "90d", "--scope", "inference", "--scope", "deploy"]) == 0
    )
    body = api.sent("POST", TOKENS)[0].body
    assert body["scopes"] == ["inference", "deploy"]
    sent = datetime.fromisoformat(body["expires"])
    assert timedelta(days=90) - timedelta(seconds=5) < sent - before < timedelta(days=90, seconds=5)
    assert "expires 2027-01-31T00:00:00Z" in capsys.readouterr().err


def test_json_output_is_the_panels_answer_with_the_token(api, capsys):
    api.on("POST", TOKENS, Answer(201, issued()))
    assert main(["create", "token", "ci", "-o", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["token"] == "ap_abcdefg_secret"


def test_a_refusal_exits_1_with_the_panels_field_error(api, capsys):
    refused = {"detail": "You already have a token with this name.",
               "errors": {"name": ["You already have a token with this name."]}}  # fmt: skip
    api.on("POST", TOKENS, Answer(400, refused))
    assert main(["create", "token", "ci"]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith("error: You already have a token with this name.")


def test_create_key_limits_an_inference_token_to_the_deployments_served_name(api, capsys):
    api.on("GET", "/api/v1/deployments/", Answer(200, page(deployment(served_model_name="qwen"))))
    api.on("POST", TOKENS, Answer(201, issued(name="chat-app", scopes=["inference"], models=["qwen"])))
    assert (
        main(["create", "key", "chat-app", "--deployment", "qwen-chat", "--rpm", "60", "--tpm", "2000"]) == 0
    )
    (sent,) = api.sent("POST", TOKENS)
    assert sent.body == {
        "name": "chat-app",
        "scopes": ["inference"],
        "models": ["qwen"],
        "requests_per_minute": 60,
        "tokens_per_minute": 2000,
    }
    captured = capsys.readouterr()
    assert captured.out == "ap_abcdefg_secret\n"
    assert captured.err == (
        "Created gateway key chat-app (ap_abcdefg…; does not expire) for qwen-chat: base URL "
        "http://10.0.0.5:18000/v1, model qwen. It is shown once: store it now.\n"
    )


def test_create_key_for_a_deployment_that_is_not_there_sends_no_token(api, capsys):
    api.on("GET", "/api/v1/deployments/", Answer(200, page()))
    assert main(["create", "key", "k", "--deployment", "nope"]) == 1
    assert "No deployment named 'nope'" in capsys.readouterr().err
    assert api.sent("POST", TOKENS) == []


@pytest.mark.parametrize(
    "argv",
    [
        ["create", "key", "k"],  # --deployment is required
        ["create", "key", "k", "--deployment", "d", "--rpm", "0"],
        ["create", "token", "ci", "--scope", "root"],
        ["create", "token", "ci", "--expires", "soon"],
        ["create", "token", "ci", "--expires", "2001-01-01"],
        ["create"],
    ],
)
def test_bad_arguments_are_usage_errors_and_nothing_is_sent(api, capsys, argv):
    try:
        code = main(argv)  # a bad --expires: a UsageError, exit 2
    except SystemExit as exited:  # argparse's own refusals
        code = exited.code
    assert code == 2
    assert api.requests == []


NOW = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("90d", NOW + timedelta(days=90)),
        ("12h", NOW + timedelta(hours=12)),
        ("1d12h", NOW + timedelta(days=1, hours=12)),
        ("30m", NOW + timedelta(minutes=30)),
        ("2027-01-31T18:00:00+08:00", datetime(2027, 1, 31, 10, 0, tzinfo=UTC)),
        ("2027-01-31T10:00:00Z", datetime(2027, 1, 31, 10, 0, tzinfo=UTC)),
    ],
)
def test_expiry_reads_durations_with_days_and_iso_times(text, expected):
    assert expiry(text, NOW) == expected


def test_a_date_alone_is_its_local_midnight():
    assert expiry("2027-01-31", NOW) == datetime(2027, 1, 31).astimezone(UTC)


@pytest.mark.parametrize("text", ["0d", "tomorrow", "-5d", "2026-05-31", "d"])
def test_expiry_refuses_what_is_no_future_moment(text):
    with pytest.raises(UsageError):
        expiry(text, NOW)
