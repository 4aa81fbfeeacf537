"""A failed agent install over SSH leaves the join token and the broker password out of the operation's log
lines, error and traceback (all stored with the operation and shown to every viewer)."""

import traceback
from pathlib import Path

import pytest

from workers.agent_install import AgentInstallFailed, run_install_agent, secrets_in, with_token
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


KEY = b"unit-test-central-key"


@pytest.fixture(autouse=True)
def central_key():
    """This process is the central agent, holding its key (and no panel key material)."""
    from workers.identity import CENTRAL, use_keys

    use_keys({CENTRAL: KEY})
    yield
    use_keys()


def _failed_install(broker: str) -> tuple[RecordingEmitter, str, str]:
    from workers.sealing import seal_for_node

    emitter = RecordingEmitter()
    args = ["--panel", "http://panel.example:8000", "--node", "n1", "--broker", broker]
    with pytest.raises(AgentInstallFailed) as failure:
        run_install_agent(
            emitter,
            ThisMachineAsTheNode(),
            script=INSTALL_SCRIPT.read_text(),
            script_args=args,
            sealed_token=seal_for_node(KEY, TOKEN),
        )
    shown = "".join(traceback.format_exception(failure.value))
    return emitter, str(failure.value), shown


def test_a_refused_broker_url_is_not_echoed_with_its_password():
    emitter, error, shown = _failed_install(f"bogus://panel:{PASSWORD}@broker.example:6379/0")
    everything = "\n".join([*emitter.lines, error, shown])
    assert "--broker must be a redis://" in everything
    assert PASSWORD not in everything
    assert TOKEN not in everything


def test_the_join_token_reaches_the_script_on_stdin_never_on_its_command_line():
    _emitter, error, shown = _failed_install("not a url at all")
    assert "--token" not in error  # the command line the error quotes carries no token at all
    assert TOKEN not in error + shown


def test_the_script_text_exports_the_token_first():
    script = with_token("echo hi\n", "apj_x'y")
    assert script.splitlines()[0] == "export ASCEND_PANEL_JOIN_TOKEN='apj_x'\"'\"'y'"


def test_the_script_refuses_a_token_on_its_command_line(tmp_path):
    import subprocess

    done = subprocess.run(
        ["bash", str(INSTALL_SCRIPT), "--panel", "http://p", "--node", "n1", "--token", TOKEN],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 2
    assert "never from the command line" in done.stderr


def test_secrets_are_the_brokers_password_only_among_the_arguments():
    args = ["--panel", "http://p", "--broker", f"redis://:{PASSWORD}@b:6379/0"]
    assert secrets_in(args) == [PASSWORD]
    assert secrets_in(["--broker", "redis://b:6379/0"]) == []
