"""deploy/install-agent.sh, run for real under a DESTDIR with SYSTEMD_OFFLINE=1: clear refusals of bad
arguments before anything is written. The installs themselves (a venv, pip, the join over HTTP) take
seconds each and are in tests/e2e/test_install_agent_script.py."""

import pytest

from tests.agent_install_script import base_args, run_script


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"--node": None}, "--node is required"),
        ({"--node": "bad name;rm"}, "--node must be 1-63 letters"),
        ({"--broker": "http://x"}, "--broker must be a redis://"),
        ({"--package-sha256": "abc"}, "--package-sha256 must be 64 hex digits"),
        ({"--panel": "panel.example"}, "--panel must be an http://"),
        ({"--python": "/nonexistent/python"}, "older than Python 3.11"),
    ],
)
def test_it_refuses_bad_arguments_before_writing_anything(tmp_path, overrides, message):
    done = run_script(*base_args(**overrides), destdir=tmp_path)
    assert done.returncode == 2
    assert message in done.stderr
    assert not (tmp_path / "etc").exists()


def test_an_unknown_option_names_itself(tmp_path):
    done = run_script(*base_args(), "--colour", "blue", destdir=tmp_path)
    assert done.returncode == 2
    assert "unknown option --colour" in done.stderr
