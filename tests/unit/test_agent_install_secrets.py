"""A failed agent install over SSH leaves the join token and the broker password out of the operation's log
lines, error and traceback (all stored with the operation and shown to every viewer)."""

import traceback
from pathlib import Path

import pytest

from workers.agent_install import AgentInstallFailed, run_install_agent, secrets_in
from workers.hosts import LocalRunner

INSTALL_SCRIPT = Path(__file__).resolve().parents[2] / "deploy" / "install-agent.sh"
TOKEN = "apj_Zk3Jd9sQ-secret-token"
PASSWORD = "broker-pa55word"


class RecordingEmitter:
    def __init__(self):
        self.lines = []

    def log(self, line, stream="stdout"):
        self.lines.append(line)

    def progress(self, percent, stage, **extra):
        pass


class ThisMachineAsTheNode:
    """The install script runs here, in a real bash, as it would on the node over SSH."""

    ssh_target = {"username": "root"}

    def runner(self):
        return LocalRunner()


def _failed_install(broker: str) -> tuple[RecordingEmitter, str, str]:
    emitter = RecordingEmitter()
    args = ["--panel", "http://panel.example:8000", "--node", "n1", "--token", TOKEN, "--broker", broker]
    with pytest.raises(AgentInstallFailed) as failure:
        run_install_agent(
            emitter, ThisMachineAsTheNode(), script=INSTALL_SCRIPT.read_text(), script_args=args
        )
    shown = "".join(traceback.format_exception(failure.value))
    return emitter, str(failure.value), shown


def test_a_refused_broker_url_is_not_echoed_with_its_password():
    # The script refuses the scheme and prints the URL it got: the password must not reach the log.
    emitter, error, shown = _failed_install(f"bogus://panel:{PASSWORD}@broker.example:6379/0")
    everything = "\n".join([*emitter.lines, error, shown])
    assert "--broker must be a redis://" in everything
    assert PASSWORD not in everything
    assert TOKEN not in everything
    assert "bogus://panel:***@broker.example:6379/0" in everything


def test_the_join_token_is_not_in_the_quoted_command_line():
    _emitter, error, shown = _failed_install("not a url at all")
    assert "--token ***" in error
    assert TOKEN not in error + shown


def test_secrets_are_the_token_and_the_brokers_password_only():
    args = ["--panel", "http://p", "--token", TOKEN, "--broker", f"redis://:{PASSWORD}@b:6379/0"]
    assert secrets_in(args) == [TOKEN, PASSWORD]
    assert secrets_in(["--broker", "redis://b:6379/0"]) == []
