"""Contexts: several panels in one config file, as kubectl keeps clusters. `login --context`, `config
get-contexts|current-context|use-context|delete-context`, the global `--context` (before or after the
command) and ASCEND_PANEL_CONTEXT; the environment's URL and token still override; a single-panel file of
before loads as the context `default`; the file stays 0600."""

import io
import stat

import pytest
import yaml

from panel.cli import config
from panel.cli.commands.completion import bash_script
from panel.cli.main import build_parser, main
from tests.unit.cli.api_server import Answer, ScriptedApi, page

NEW_TOKEN = {"id": 1, "name": "t", "prefix": "ap_abcdefg", "usable": True}


@pytest.fixture
def home(monkeypatch, tmp_path):
    """No ASCEND_PANEL_* from outside; the config directory in tmp_path. Returns the config file's path."""
    for name in (
        "ASCEND_PANEL_URL",
        "ASCEND_PANEL_TOKEN",
        "ASCEND_PANEL_CONTEXT",
        "ASCEND_PANEL_IDEMPOTENCY_KEY",
    ):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("LANG", "C.UTF-8")
    return tmp_path / "config" / "ascend-panel" / "config.yaml"


@pytest.fixture
def prod():
    with ScriptedApi() as api:
        api.on("GET", "/api/v1/nodes/", Answer(200, page({"name": "prod-node", "status": "online"})))
        yield api


@pytest.fixture
def lab():
    with ScriptedApi() as api:
        api.on("GET", "/api/v1/nodes/", Answer(200, page({"name": "lab-node", "status": "online"})))
        yield api


def sign_in(api, monkeypatch, *args) -> int:
    api.on("POST", "/api/v1/tokens/sign-in/", Answer(201, {**NEW_TOKEN, "token": f"ap_for_{api.url[-5:]}"}))
    monkeypatch.setattr("sys.stdin", io.StringIO("bob-password\n"))
    return main(["login", api.url, "-u", "bob", "--password-stdin", *args])


def node_names(capsys, *args) -> tuple[int, str]:
    capsys.readouterr()
    code = main([*args])
    return code, capsys.readouterr().out.strip()


def test_two_panels_are_two_contexts_and_use_context_switches(home, prod, lab, monkeypatch, capsys):
    assert sign_in(prod, monkeypatch, "--context", "prod") == 0
    assert capsys.readouterr().out.endswith(f"stored in {home} as context prod.\n")
    assert sign_in(lab, monkeypatch, "--context", "lab") == 0  # the newest login is the current context
    assert stat.S_IMODE(home.stat().st_mode) == 0o600

    assert node_names(capsys, "nodes", "ls", "-o", "name") == (0, "lab-node")
    assert node_names(capsys, "config", "current-context") == (0, "lab")
    code, table = node_names(capsys, "config", "get-contexts")
    assert code == 0
    assert table.splitlines() == [
        "CURRENT  NAME  URL                     USER",
        f"*        lab   {lab.url}  bob",
        f"         prod  {prod.url}  bob",
    ]
    assert "ap_for" not in table  # tokens are never printed

    assert node_names(capsys, "config", "use-context", "prod") == (
        0,
        f"Switched to context prod ({prod.url}).",
    )
    assert stat.S_IMODE(home.stat().st_mode) == 0o600
    assert node_names(capsys, "nodes", "ls", "-o", "name") == (0, "prod-node")
    assert prod.sent("GET", "/api/v1/nodes/")[-1].headers["Authorization"] == f"Bearer ap_for_{prod.url[-5:]}"
    assert node_names(capsys, "config", "get-contexts", "-o", "name") == (0, "lab\nprod")


def test_the_global_context_flag_picks_a_panel_for_one_command_before_or_after_it(
    home, prod, lab, monkeypatch, capsys
):
    sign_in(prod, monkeypatch, "--context", "prod")
    sign_in(lab, monkeypatch, "--context", "lab")
    assert node_names(capsys, "--context", "prod", "nodes", "ls", "-o", "name") == (0, "prod-node")
    assert node_names(capsys, "nodes", "ls", "-o", "name", "--context", "prod") == (0, "prod-node")
    assert node_names(capsys, "nodes", "--context", "prod", "ls", "-o", "name") == (0, "prod-node")
    assert node_names(capsys, "nodes", "ls", "-o", "name") == (0, "lab-node")  # the current one is kept
    assert node_names(capsys, "--context", "prod", "config", "current-context") == (0, "prod")
    monkeypatch.setenv("ASCEND_PANEL_CONTEXT", "prod")
    assert node_names(capsys, "nodes", "ls", "-o", "name") == (0, "prod-node")
    assert node_names(capsys, "--context", "lab", "nodes", "ls", "-o", "name") == (
        0,
        "lab-node",
    )  # the flag wins


def test_an_unknown_context_is_a_usage_error_naming_the_known_ones(home, prod, monkeypatch, capsys):
    sign_in(prod, monkeypatch, "--context", "prod")
    capsys.readouterr()
    assert main(["--context", "staging", "nodes", "ls"]) == 2
    assert "No context named 'staging'" in capsys.readouterr().err
    assert main(["config", "use-context", "staging"]) == 2
    assert "(there are: prod)" in capsys.readouterr().err
    assert main(["config", "delete-context", "staging"]) == 2
    assert yaml.safe_load(home.read_text())["current-context"] == "prod"


def test_a_bad_context_name_is_refused_before_signing_in(home, prod, monkeypatch, capsys):
    assert sign_in(prod, monkeypatch, "--context", "my panel") == 2
    assert "not a context name" in capsys.readouterr().err
    assert prod.requests == []  # no token was issued for nothing
    assert not home.exists()


def test_login_without_context_names_the_first_panel_default_and_others_by_host(
    home, prod, lab, monkeypatch, capsys
):
    sign_in(prod, monkeypatch)
    sign_in(lab, monkeypatch)
    sign_in(prod, monkeypatch)  # the same URL again: its own context, refreshed and current
    stored = yaml.safe_load(home.read_text())
    host = lab.url.removeprefix("http://")
    assert sorted(stored["contexts"]) == [host, "default"]
    assert stored["current-context"] == "default"
    assert stored["contexts"][host]["url"] == lab.url


def test_a_single_panel_file_of_before_loads_as_default_and_is_rewritten_on_the_next_write(
    home, prod, lab, monkeypatch, capsys
):
    home.parent.mkdir(parents=True, mode=0o700)
    home.write_text(yaml.safe_dump({"url": prod.url, "token": "ap_old", "username": "bob"}))
    home.chmod(0o600)
    assert node_names(capsys, "nodes", "ls", "-o", "name") == (0, "prod-node")
    assert prod.sent("GET", "/api/v1/nodes/")[-1].headers["Authorization"] == "Bearer ap_old"
    assert node_names(capsys, "config", "current-context") == (0, "default")
    assert node_names(capsys, "config", "get-contexts", "-o", "name") == (0, "default")
    assert "contexts" not in yaml.safe_load(home.read_text())  # reading never rewrites the file

    sign_in(lab, monkeypatch, "--context", "lab")
    stored = yaml.safe_load(home.read_text())
    assert stored == {
        "current-context": "lab",
        "contexts": {
            "default": {"url": prod.url, "token": "ap_old", "username": "bob"},
            "lab": {"url": lab.url, "token": f"ap_for_{lab.url[-5:]}", "username": "bob"},
        },
    }
    assert stat.S_IMODE(home.stat().st_mode) == 0o600


def test_the_environment_still_overrides_the_contexts_values(home, prod, lab, monkeypatch, capsys):
    sign_in(prod, monkeypatch, "--context", "prod")
    monkeypatch.setenv("ASCEND_PANEL_URL", lab.url)
    monkeypatch.setenv("ASCEND_PANEL_TOKEN", "ap_from_env")
    assert node_names(capsys, "nodes", "ls", "-o", "name") == (0, "lab-node")
    assert lab.sent("GET", "/api/v1/nodes/")[-1].headers["Authorization"] == "Bearer ap_from_env"
    settings = config.load()
    assert (settings.source, settings.context) == ("ASCEND_PANEL_URL, ASCEND_PANEL_TOKEN", "")
    capsys.readouterr()
    assert main(["config", "get-contexts"]) == 0
    assert "ASCEND_PANEL_URL and ASCEND_PANEL_TOKEN override the context's values" in capsys.readouterr().err
    monkeypatch.delenv("ASCEND_PANEL_URL")
    assert config.load().url == prod.url  # the token alone from the environment, the URL from the context
    assert config.load().token == "ap_from_env"


def test_deleting_the_current_context_leaves_none_current(home, prod, lab, monkeypatch, capsys):
    sign_in(prod, monkeypatch, "--context", "prod")
    sign_in(lab, monkeypatch, "--context", "lab")
    capsys.readouterr()
    assert main(["config", "delete-context", "lab"]) == 0
    assert "It was the current context" in capsys.readouterr().err
    assert main(["config", "current-context"]) == 1
    assert "No current context" in capsys.readouterr().err
    assert main(["nodes", "ls"]) == 2  # not signed in to any panel now: say how
    assert main(["--context", "prod", "nodes", "ls", "-o", "name"]) == 0
    assert sorted(yaml.safe_load(home.read_text())["contexts"]) == ["prod"]


def test_no_contexts_yet(home, capsys):
    assert main(["config", "get-contexts"]) == 0
    assert capsys.readouterr().err == "No contexts: run `ascend-panel login URL`.\n"
    assert main(["config", "current-context"]) == 1


def test_bash_completion_offers_context_names_and_the_flag():
    script = bash_script(build_parser())
    assert "ascend-panel config get-contexts -o name" in script
    assert '"config") echo "get-contexts current-context use-context delete-context"' in script
    assert "--context" in script
