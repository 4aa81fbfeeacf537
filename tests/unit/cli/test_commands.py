"""login, get, nodes, models, logs and chat against a local server answering as the API documents: what
each sends, what it prints, and its exit code."""

import io
import json
import stat

import yaml

from panel.cli import config
from panel.cli.commands import logs as logs_command_module
from panel.cli.main import main
from tests.unit.cli.api_server import Answer, deployment, page

SIGN_IN = "/api/v1/tokens/sign-in/"
NEW_TOKEN = {"id": 1, "name": "ci", "prefix": "ap_abcdefg", "token": "ap_abcdefg_secret", "usable": True}


def test_login_signs_in_and_stores_url_and_token_readable_by_the_user_only(
    api, monkeypatch, tmp_path, capsys
):
    monkeypatch.delenv("ASCEND_PANEL_URL")
    monkeypatch.delenv("ASCEND_PANEL_TOKEN")
    monkeypatch.setattr("sys.stdin", io.StringIO("bob-password\n"))
    api.on("POST", SIGN_IN, Answer(201, NEW_TOKEN))
    assert main(["login", api.url + "/", "-u", "bob", "--password-stdin", "--token-name", "ci"]) == 0
    (sent,) = api.sent("POST", SIGN_IN)
    assert sent.body == {"username": "bob", "password": "bob-password", "name": "ci"}
    assert "Authorization" not in sent.headers
    path = tmp_path / "config" / "ascend-panel" / "config.yaml"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert yaml.safe_load(path.read_text()) == {
        "current-context": "default",
        "contexts": {"default": {"url": api.url, "token": "ap_abcdefg_secret", "username": "bob"}},
    }
    assert capsys.readouterr().out == (
        f"Signed in to {api.url} as bob; the token is stored in {path} as context default.\n"
    )
    api.on("GET", "/api/v1/nodes/", Answer(200, page()))
    assert main(["nodes", "ls"]) == 0  # the stored token is used from now on
    assert api.sent("GET", "/api/v1/nodes/")[0].headers["Authorization"] == "Bearer ap_abcdefg_secret"


def test_a_wrong_password_exits_1_and_stores_nothing(api, monkeypatch, tmp_path, capsys):
    monkeypatch.setattr("sys.stdin", io.StringIO("guess\n"))
    api.on("POST", SIGN_IN, Answer(401, {"detail": "Wrong user name or password."}))
    assert main(["login", api.url, "-u", "bob", "--password-stdin"]) == 1
    assert capsys.readouterr().err == "error: Wrong user name or password.\n"
    assert not (tmp_path / "config" / "ascend-panel" / "config.yaml").exists()


def test_a_lockout_exits_1_with_the_panels_sentence(api, monkeypatch, capsys):
    monkeypatch.setattr("sys.stdin", io.StringIO("bob-password\n"))
    detail = "Too many failed sign-ins for this user from your address. Try again in 15 minutes."
    api.on("POST", SIGN_IN, Answer(429, {"detail": detail}))
    assert main(["login", api.url, "-u", "bob", "--password-stdin"]) == 1
    assert detail in capsys.readouterr().err


def test_an_older_panel_without_api_sign_in_is_told_to_use_a_token(api, monkeypatch, capsys):
    monkeypatch.setattr("sys.stdin", io.StringIO("bob-password\n"))
    assert main(["login", api.url, "-u", "bob", "--password-stdin"]) == 1
    assert "--token TOKEN" in capsys.readouterr().err


def test_login_with_a_token_checks_it_before_storing_it(api, tmp_path):
    api.on("GET", "/api/v1/tokens/", Answer(401, {"detail": "Invalid, expired or revoked API token."}))
    assert main(["login", api.url, "--token", "ap_revoked"]) == 1
    assert not (tmp_path / "config" / "ascend-panel" / "config.yaml").exists()
    api.on("GET", "/api/v1/tokens/", Answer(200, page()))
    assert main(["login", api.url, "--token", "ap_good"]) == 0
    assert api.sent("GET", "/api/v1/tokens/")[-1].headers["Authorization"] == "Bearer ap_good"
    stored = config.read_file(tmp_path / "config" / "ascend-panel" / "config.yaml")
    assert stored["contexts"]["default"]["token"] == "ap_good"


def test_login_without_a_terminal_or_password_stdin_is_a_usage_error(api, monkeypatch, capsys):
    monkeypatch.setattr("sys.stdin", io.StringIO(""))
    assert main(["login", api.url, "-u", "bob"]) == 2
    assert "--password-stdin" in capsys.readouterr().err
    assert api.requests == []


def test_get_deployments_prints_a_table(api, capsys):
    api.on("GET", "/api/v1/deployments/", Answer(200, page(deployment(created=None))))
    assert main(["get", "deployments"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "NAME       STATUS   MODEL                NPUS                ENDPOINT                  AGE",
        "qwen-chat  running  qwen2.5-7b-instruct  sim-a2:0, sim-a2:1  http://10.0.0.5:18000/v1",
    ]


def test_get_follows_every_page(api, capsys):
    first = {"count": 2, "next": f"{api.url}/api/v1/deployments/?page=2", "results": [deployment()]}
    api.on("GET", "/api/v1/deployments/", Answer(200, first), Answer(200, page(deployment(name="embed"))))
    assert main(["get", "deployments", "-o", "name"]) == 0
    assert capsys.readouterr().out == "qwen-chat\nembed\n"
    assert [r.query for r in api.sent("GET", "/api/v1/deployments/")] == [{}, {"page": "2"}]


def test_get_one_as_json_is_the_deployment(api, capsys):
    api.on("GET", "/api/v1/deployments/", Answer(200, page(deployment())))
    assert main(["get", "deployments", "qwen-chat", "-o", "json"]) == 0
    assert json.loads(capsys.readouterr().out) == deployment()


def test_json_and_yaml_print_the_same_object_for_one_and_for_a_list(api, capsys):
    api.on("GET", "/api/v1/deployments/", Answer(200, page(deployment(), deployment(id=8, name="embed"))))
    printed = {}
    for fmt in ("json", "yaml"):
        assert main(["get", "deployments", "qwen-chat", "-o", fmt]) == 0
        one = capsys.readouterr().out
        assert main(["get", "deployments", "-o", fmt]) == 0
        every = capsys.readouterr().out
        printed[fmt] = (
            (json.loads(one), json.loads(every))
            if fmt == "json"
            else (yaml.safe_load(one), yaml.safe_load(every))
        )
    assert printed["json"] == printed["yaml"]
    assert printed["json"][0] == deployment()
    assert printed["json"][1] == {"items": [deployment(), deployment(id=8, name="embed")]}


def test_get_spec_prints_the_spec_apply_takes_back_as_yaml_or_json(api, capsys):
    spec = {
        "name": "qwen-chat",
        "model": "qwen2.5-7b-instruct",
        "placement": {"node": "sim-a2", "npus": [0, 1]},
    }
    api.on("GET", "/api/v1/deployments/", Answer(200, page(deployment())))
    api.on("GET", "/api/v1/deployments/7/", Answer(200, spec))
    assert main(["get", "deployments", "qwen-chat", "--spec"]) == 0
    assert yaml.safe_load(capsys.readouterr().out) == spec
    assert main(["get", "deployments", "qwen-chat", "--spec", "-o", "json"]) == 0
    assert json.loads(capsys.readouterr().out) == spec
    assert [r.query for r in api.sent("GET", "/api/v1/deployments/7/")] == [{"format": "spec"}] * 2


def test_get_spec_needs_one_name(api, capsys):
    assert main(["get", "deployments", "--spec"]) == 2
    assert "--spec prints the spec of one deployment" in capsys.readouterr().err
    assert api.requests == []


def test_get_a_deployment_that_is_not_there_exits_1(api, capsys):
    api.on("GET", "/api/v1/deployments/", Answer(200, page()))
    assert main(["get", "deployments", "nope"]) == 1
    assert capsys.readouterr().err == "error: No deployment named 'nope'.\n"


def test_nodes_ls(api, capsys):
    node = {"name": "sim-a2", "status": "online", "address": "10.0.0.5", "transport": "agent",
            "npus": [{}] * 8, "cordoned": False, "last_heartbeat": None}  # fmt: skip
    api.on("GET", "/api/v1/nodes/", Answer(200, page(node)))
    assert main(["nodes", "ls"]) == 0
    assert capsys.readouterr().out.splitlines()[1].split() == ["sim-a2", "online", "10.0.0.5", "agent", "8"]


def test_models_ls_add_rm(api, capsys):
    model = {"name": "qwen", "source": "local", "repo_id": "",
             "artifacts": [{"node": "sim-a2", "path": "/data/models/qwen", "ready": True}]}  # fmt: skip
    api.on("GET", "/api/v1/models/", Answer(200, page(model)))
    api.on("PUT", "/api/v1/models/qwen/", Answer(201, model))
    api.on("DELETE", "/api/v1/models/qwen/", Answer(409, {"detail": "qwen-chat uses qwen."}), Answer(204))
    assert main(["models", "ls"]) == 0
    assert "sim-a2:/data/models/qwen" in capsys.readouterr().out
    assert main(["models", "add", "qwen", "--node", "sim-a2", "--path", "/data/models/qwen"]) == 0
    assert capsys.readouterr().out == "qwen: created\n"
    assert api.sent("PUT", "/api/v1/models/qwen/")[0].body == {
        "source": "local", "node": "sim-a2", "path": "/data/models/qwen"
    }  # fmt: skip
    assert main(["models", "rm", "qwen"]) == 1
    assert capsys.readouterr().err == "error: qwen-chat uses qwen.\n"
    assert main(["models", "rm", "qwen"]) == 0


def test_models_add_needs_a_repo_or_a_path(api, capsys):
    assert main(["models", "add", "qwen"]) == 2
    assert main(["models", "add", "qwen", "--path", "/data/x"]) == 2
    assert api.requests == []


def test_logs_prints_every_page_in_order(api, capsys, monkeypatch):
    monkeypatch.setattr(logs_command_module, "PAGE_LINES", 2)  # the fake answers pages of two
    lines = [
        {"seq": n, "time": "2026-01-01T10:00:00Z", "node": "sim-a2", "line": f"line {n}\n"} for n in (1, 2, 3)
    ]
    api.on("GET", "/api/v1/deployments/", Answer(200, page(deployment())))
    api.on(
        "GET",
        "/api/v1/deployments/7/logs/",
        Answer(200, {"deployment": "qwen-chat", "last_seq": 3, "results": lines[:2]}),
        Answer(200, {"deployment": "qwen-chat", "last_seq": 3, "results": lines[2:]}),
    )
    assert main(["logs", "qwen-chat", "--timestamps"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        f"2026-01-01T10:00:00Z sim-a2 line {n}" for n in (1, 2, 3)
    ]
    assert [r.query for r in api.sent("GET", "/api/v1/deployments/7/logs/")] == [
        {"after_seq": "0", "limit": "2"},
        {"after_seq": "2", "limit": "2"},
    ]


def test_logs_asks_for_the_probe_lines_only_with_probes(api, capsys):
    line = {"seq": 9, "time": "2026-01-01T10:00:00Z", "node": "sim-a2", "line": "engine says hi\n"}
    api.on("GET", "/api/v1/deployments/", Answer(200, page(deployment())))
    api.on(
        "GET",
        "/api/v1/deployments/7/logs/",
        # Lines 10 to 12 were probe lines, left out: a short page still answers up to last_seq.
        Answer(200, {"deployment": "qwen-chat", "last_seq": 12, "results": [line]}),
        Answer(200, {"deployment": "qwen-chat", "last_seq": 12, "results": [line]}),
    )
    assert main(["logs", "qwen-chat"]) == 0
    assert main(["logs", "qwen-chat", "--probes"]) == 0
    assert capsys.readouterr().out.splitlines() == ["engine says hi", "engine says hi"]
    queries = [r.query for r in api.sent("GET", "/api/v1/deployments/7/logs/")]
    assert [q.get("probes") for q in queries] == [None, "true"]


def test_chat_prints_the_answer(api, capsys):
    answer = {
        "choices": [{"message": {"role": "assistant", "content": "Hello!"}}],
        "usage": {"total_tokens": 9},
    }
    api.on("GET", "/api/v1/deployments/", Answer(200, page(deployment())))
    api.on("POST", "/api/v1/deployments/7/chat/", Answer(200, answer))
    assert main(["chat", "qwen-chat", "Say hello", "--max-tokens", "8"]) == 0
    assert capsys.readouterr().out == "Hello!\n"
    assert api.sent("POST", "/api/v1/deployments/7/chat/")[0].body == {
        "messages": [{"role": "user", "content": "Say hello"}], "stream": False, "max_tokens": 8
    }  # fmt: skip


def test_chat_with_a_stopped_deployment_or_a_failing_engine_exits_1(api, capsys):
    api.on("GET", "/api/v1/deployments/", Answer(200, page(deployment())))
    api.on(
        "POST",
        "/api/v1/deployments/7/chat/",
        Answer(409, {"detail": "The deployment is not running."}),
        Answer(400, {"object": "error", "message": "max_tokens is too large", "code": 400}),
    )
    assert main(["chat", "qwen-chat", "hi"]) == 1
    assert main(["chat", "qwen-chat", "hi"]) == 1
    assert capsys.readouterr().err.splitlines() == [
        "error: The deployment is not running.",
        "error: max_tokens is too large",
    ]


def test_an_error_page_that_is_not_json_still_says_what_happened(api, capsys):
    api.on("GET", "/api/v1/nodes/", Answer(502, "<html>Bad Gateway</html>", content_type="text/html"))
    assert main(["nodes", "ls"]) == 1
    assert capsys.readouterr().err.startswith("error: HTTP 502 Bad Gateway: ")


def test_an_unreachable_panel_exits_1(monkeypatch, capsys):
    monkeypatch.setenv("ASCEND_PANEL_URL", "http://127.0.0.1:9")
    monkeypatch.setenv("ASCEND_PANEL_TOKEN", "ap_x")
    assert main(["nodes", "ls"]) == 1
    assert "Cannot reach the panel at http://127.0.0.1:9" in capsys.readouterr().err


def test_the_api_answers_in_the_readers_language(api, monkeypatch):
    api.on("GET", "/api/v1/nodes/", Answer(200, page()))
    monkeypatch.setenv("LANG", "zh_CN.UTF-8")
    main(["nodes", "ls"])
    assert api.requests[-1].headers["Accept-Language"] == "zh-hans"
