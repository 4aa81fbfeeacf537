"""The CLI's parts without a server: argument parsing, durations, the config file, output formatting, the
bash completion script, and that it loads no Django."""

import argparse
import os
import stat
import subprocess
import sys
import tomllib
from datetime import UTC, datetime
from pathlib import Path

import pytest

from panel.cli import config, output
from panel.cli.commands.apply import result_line
from panel.cli.durations import describe, parse_duration
from panel.cli.errors import UsageError
from panel.cli.main import build_parser, main
from tests.unit.cli.api_server import Answer, deployment, page

REPO = Path(__file__).resolve().parents[3]


def run_cli(*args, env=None, **kwargs):
    return subprocess.run(
        [sys.executable, "-m", "panel.cli", *args],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO), **(env or {})},
        capture_output=True,
        text=True,
        timeout=60,
        **kwargs,
    )


# --- no Django ---------------------------------------------------------------------------------------------


def test_importing_and_running_help_loads_no_django_and_nothing_else_of_the_panel():
    probe = (
        "import sys\n"
        "from panel.cli.main import main\n"
        "for argv in (['--help'], ['apply', '--help'], ['completion', 'bash'], ['nodes', 'ls']):\n"
        "    try:\n"
        "        main(argv)\n"
        "    except SystemExit:\n"
        "        pass\n"
        "outside = ('django', 'rest_framework', 'celery')\n"
        "loaded = sorted(m for m in sys.modules if m.split('.')[0] in outside\n"
        "                or (m.startswith('panel.') and not m.startswith('panel.cli')))\n"
        "print('LOADED', loaded)\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ASCEND_PANEL_", "DJANGO_"))}
    done = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=REPO,
        # A panel that is not there: each command gets as far as its HTTP call.
        env={
            **env,
            "PYTHONPATH": str(REPO),
            "ASCEND_PANEL_URL": "http://127.0.0.1:9",
            "ASCEND_PANEL_TOKEN": "x",
        },
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert "LOADED []" in done.stdout, done.stdout + done.stderr


def test_the_console_script_and_python_m_run_the_same_main():
    scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["ascend-panel"] == "panel.cli.main:main"
    done = run_cli("--version")
    assert done.returncode == 0
    assert done.stdout.startswith("ascend-panel ")


# --- parsing -----------------------------------------------------------------------------------------------


def all_parsers(parser, path=()):
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from all_parsers(sub, (*path, name))


@pytest.mark.parametrize("path", [p for p, _ in all_parsers(build_parser())], ids=" ".join)
def test_every_command_has_help(path, capsys):
    with pytest.raises(SystemExit) as exit:
        main([*path, "--help"])
    assert exit.value.code == 0
    assert "usage: ascend-panel" in capsys.readouterr().out


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["models"],
        ["nodes", "rm"],
        ["apply"],
        ["apply", "-f", "x.yaml", "--timeout", "soon"],
        ["wait", "qwen-chat"],
        ["wait", "qwen-chat", "--for", "ready"],
        ["get", "deployments", "-o", "xml"],
        ["chat", "qwen-chat"],
        ["completion", "zsh"],
        ["delete"],
        ["get", "deployments", "-o", "jsonpath={.items["],
        ["describe"],
        ["describe", "pod", "x"],
        ["rollout", "status"],
        ["rollout", "pause", "x"],
        ["rollout", "status", "x", "--timeout", "soon"],
        ["diff"],
    ],
    ids=lambda argv: " ".join(argv) or "nothing",
)
def test_wrong_arguments_exit_2_with_the_commands_usage(argv, capsys):
    with pytest.raises(SystemExit) as exit:
        main(argv)
    assert exit.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: ascend-panel")
    assert "--help` for more." in err


def test_defaults():
    parser = build_parser()
    args = parser.parse_args(["apply", "-f", "-"])
    assert (args.file, args.dry_run, args.wait, args.timeout, args.output) == (
        "-",
        False,
        False,
        600.0,
        "text",
    )
    args = parser.parse_args(["wait", "x", "--for", "deleted", "--timeout", "1h30m"])
    assert (args.name, args.target, args.timeout) == ("x", "deleted", 5400.0)
    args = parser.parse_args(["get", "deployment", "x"])
    assert (args.name, args.output) == ("x", "table")


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("90", 90), ("90s", 90), ("10m", 600), ("1h", 3600), ("1h30m", 5400), ("2.5m", 150), ("1H", 3600)],
)
def test_durations(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "0", "0s", "-5m", "5x", "m", "1h30", "10 m", "1.5.2s"])
def test_what_is_not_a_duration(text):
    with pytest.raises(ValueError, match="not a duration"):
        parse_duration(text)


def test_durations_are_repeated_back_the_same_way():
    assert [describe(s) for s in (600, 5400, 42.5, 3600, 61)] == ["10m", "1h30m", "42.5s", "1h", "1m1s"]


# --- config ------------------------------------------------------------------------------------------------


def test_the_config_file_is_0600_in_a_0700_directory_even_under_a_permissive_umask(tmp_path):
    old = os.umask(0)
    try:
        path = config.save(
            "https://panel.example", "ap_secret", "bob", environ={"XDG_CONFIG_HOME": str(tmp_path)}
        )
    finally:
        os.umask(old)
    assert path == tmp_path / "ascend-panel" / "config.yaml"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert [p.name for p in path.parent.iterdir()] == ["config.yaml"]  # no temporary file left


def test_saving_again_replaces_the_file_and_keeps_it_private(tmp_path):
    environ = {"XDG_CONFIG_HOME": str(tmp_path)}
    config.save("https://a.example", "ap_1", environ=environ)
    path = config.save("https://b.example", "ap_2", environ=environ)  # a second panel: a second context
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert config.load(environ) == config.Settings("https://b.example", "ap_2", str(path), "b.example")
    config.save("https://a.example", "ap_3", environ=environ)  # the first again: its context, refreshed
    assert config.load(environ) == config.Settings("https://a.example", "ap_3", str(path), "default")
    assert sorted(config.read_contexts(environ).entries) == ["b.example", "default"]


def test_without_xdg_config_home_it_lives_in_dot_config(tmp_path):
    assert (
        config.config_path({"HOME": str(tmp_path)}) == tmp_path / ".config" / "ascend-panel" / "config.yaml"
    )


def test_the_environment_overrides_the_file(tmp_path):
    environ = {"XDG_CONFIG_HOME": str(tmp_path)}
    config.save("https://file.example", "ap_file", environ=environ)
    settings = config.load({**environ, "ASCEND_PANEL_TOKEN": "ap_env"})
    assert (settings.url, settings.token, settings.source) == (
        "https://file.example",
        "ap_env",
        "ASCEND_PANEL_TOKEN",
    )
    settings = config.load({"ASCEND_PANEL_URL": "http://ci.example:8000/", "ASCEND_PANEL_TOKEN": "ap_ci"})
    assert (settings.url, settings.token) == ("http://ci.example:8000", "ap_ci")


def test_not_signed_in_is_a_usage_error_that_says_how(tmp_path):
    with pytest.raises(UsageError, match="No panel URL and token: run `ascend-panel login URL`"):
        config.load({"XDG_CONFIG_HOME": str(tmp_path)})
    with pytest.raises(UsageError, match="No panel token"):
        config.load({"XDG_CONFIG_HOME": str(tmp_path), "ASCEND_PANEL_URL": "http://x"})


def test_a_file_others_can_read_is_warned_about(tmp_path, capsys):
    environ = {"XDG_CONFIG_HOME": str(tmp_path)}
    path = config.save("https://panel.example", "ap_1", environ=environ)
    path.chmod(0o644)
    assert config.load(environ).token == "ap_1"
    assert f"warning: {path} is readable by others" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("given", "url"),
    [
        ("https://panel.example/", "https://panel.example"),
        ("http://10.0.0.1:8000/api/v1/", "http://10.0.0.1:8000"),
        ("https://example.com/panel", "https://example.com/panel"),
    ],
)
def test_urls_are_normalised(given, url):
    assert config.normalise_url(given) == url


@pytest.mark.parametrize("given", ["panel.example", "ftp://panel.example", "https://", "https://x/?a=1"])
def test_urls_that_are_not_a_panel_are_usage_errors(given):
    with pytest.raises(UsageError):
        config.normalise_url(given)


# --- output ------------------------------------------------------------------------------------------------


def test_a_table_pads_columns_and_trims_line_ends():
    assert output.table([["a", 1, None], ["longer", 22, "x"]], ["NAME", "N", "MORE"]) == (
        "NAME    N   MORE\na       1\nlonger  22  x"
    )


def test_age_in_its_largest_unit():
    now = datetime(2026, 1, 2, 12, 0, tzinfo=UTC)
    ages = [output.age(t, now) for t in ("2026-01-02T11:59:30Z", "2026-01-02T11:50:00+00:00",
                                         "2026-01-02T09:00:00Z", "2025-12-30T12:00:00Z", None)]  # fmt: skip
    assert ages == ["30s", "10m", "3h", "3d", ""]


def test_field_errors_flat_and_nested_give_the_same_paths():
    flat = {"nodes[0].npus": ["NPU 9 does not exist."], "name": ["Taken.", "Too long."]}
    nested = {"nodes": [{"npus": ["NPU 9 does not exist."]}, {}], "name": ["Taken.", "Too long."]}
    old_style = {"nodes": {"0": {"npus": ["NPU 9 does not exist."]}}, "name": ["Taken.", "Too long."]}
    expected = [("nodes[0].npus", "NPU 9 does not exist."), ("name", "Taken."), ("name", "Too long.")]
    assert output.field_errors(flat) == expected
    assert output.field_errors(nested) == expected
    assert output.field_errors(old_style) == expected
    assert output.field_errors({"non_field_errors": ["Pick a node."]}) == [("", "Pick a node.")]


def test_error_lines_skip_a_field_error_the_detail_already_says():
    body = {"detail": "name: Taken.", "errors": {"name": ["Taken."], "model": ["Unknown model."]}}
    assert output.error_lines(body["detail"], body) == ["error: name: Taken.", "  model: Unknown model."]


def test_warnings_and_findings_read_as_text_or_objects():
    assert output.message_of({"level": "warning", "message": "Tight."}) == "Tight."
    assert output.message_of({"code": "hbm_oom"}) == "hbm_oom"
    assert output.message_of("Plain text.") == "Plain text."
    assert output.failure_lines({"findings": ["npu-smi failed"], "log_tail": []}) == [
        "  finding: npu-smi failed"
    ]


def test_a_changed_result_names_its_fields_and_effect():
    answer = {
        "result": "changed",
        "changes": [{"field": "replicas", "from": 1, "to": 2}],
        "effect": "restart",
    }
    assert result_line("x", answer) == "x: changed: replicas (restart)"
    assert result_line("x", {"result": "created", "dry_run": True}) == "x: created (dry run)"


# --- bash completion ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def completion_script():
    done = run_cli("completion", "bash")
    assert done.returncode == 0, done.stderr
    return done.stdout


def complete(script: str, line: str, cwd=None) -> list[str]:
    """What bash offers for `line` (the word being typed is its last word, empty after a space)."""
    words = line.split(" ")
    program = (
        f"{script}\nCOMP_WORDS=({' '.join(repr(w) for w in words)}); COMP_CWORD={len(words) - 1}\n"
        '_ascend_panel; printf "%s\\n" "${COMPREPLY[@]}"\n'
    )
    done = subprocess.run(["bash", "-c", program], capture_output=True, text=True, timeout=30, cwd=cwd)
    assert done.returncode == 0, done.stderr
    return sorted(filter(None, done.stdout.splitlines()))


def test_bash_completes_commands_options_and_choices(completion_script, tmp_path):
    assert complete(completion_script, "ascend-panel mo") == ["models"]
    assert complete(completion_script, "ascend-panel models ") == ["add", "ls", "rm"]
    assert complete(completion_script, "ascend-panel get deployments -o ") == [
        "json",
        "jsonpath=",
        "name",
        "table",
        "yaml",
    ]
    assert complete(completion_script, "ascend-panel rollout ") == ["history", "restart", "status", "undo"]
    assert complete(completion_script, "ascend-panel describe n") == ["node", "nodes"]
    assert complete(completion_script, "ascend-panel wait qwen --for r") == ["running"]
    assert complete(completion_script, "ascend-panel apply --d") == ["--dry-run"]
    (tmp_path / "qwen-chat.yaml").write_text("name: qwen-chat\n")
    assert complete(completion_script, "ascend-panel apply -f qw", cwd=tmp_path) == ["qwen-chat.yaml"]
    assert complete(completion_script, "ascend-panel diff -f qw", cwd=tmp_path) == ["qwen-chat.yaml"]
    assert complete(completion_script, "ascend-panel apply --timeout ") == []


def test_bash_completes_names_from_the_panel_with_the_real_cli(completion_script, api, tmp_path, monkeypatch):
    api.on("GET", "/api/v1/deployments/", Answer(200, page(deployment(), deployment(name="qwen-embed"))))
    api.on("GET", "/api/v1/nodes/", Answer(200, page({"name": "sim-a2"})))
    wrapper = tmp_path / "bin" / "ascend-panel"
    wrapper.parent.mkdir()
    wrapper.write_text(f'#!/bin/sh\nPYTHONPATH={REPO} exec {sys.executable} -m panel.cli "$@"\n')
    wrapper.chmod(0o755)
    monkeypatch.setenv("PATH", f"{wrapper.parent}{os.pathsep}{os.environ['PATH']}")
    assert complete(completion_script, "ascend-panel logs qwen-") == ["qwen-chat", "qwen-embed"]
    assert complete(completion_script, "ascend-panel delete qwen-e") == ["qwen-embed"]
    assert complete(completion_script, "ascend-panel models add x --node ") == ["sim-a2"]
