"""deploy/install-agent.sh, run for real under a DESTDIR with SYSTEMD_OFFLINE=1: arguments, agent.env, the
venv with the package installed, the unit file; and clear refusals of bad arguments."""

import os
import stat
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "deploy" / "install-agent.sh"
UNIT = REPO / "deploy" / "ascend-panel-agent.service"


def tiny_agent_wheel(directory: Path) -> Path:
    """A dependency-free wheel with the modules the script imports (`workers.agent`, `workers.tasks`), so pip
    installs it offline."""
    wheel = directory / "ascend_panel_agent-0.0.1-py3-none-any.whl"
    dist_info = "ascend_panel_agent-0.0.1.dist-info"
    files = {
        "workers/__init__.py": "",
        "workers/agent.py": "AGENT = 'installed'\n",
        "workers/tasks/__init__.py": "",
        f"{dist_info}/METADATA": "Metadata-Version: 2.1\nName: ascend-panel-agent\nVersion: 0.0.1\n",
        f"{dist_info}/WHEEL": (
            "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        ),
    }
    record = "".join(f"{name},,\n" for name in files) + f"{dist_info}/RECORD,,\n"
    with zipfile.ZipFile(wheel, "w") as archive:
        for name, text in files.items():
            archive.writestr(name, text)
        archive.writestr(f"{dist_info}/RECORD", record)
    return wheel


def run_script(*args, destdir: Path):
    env = {**os.environ, "DESTDIR": str(destdir), "SYSTEMD_OFFLINE": "1", "PIP_NO_INDEX": "1"}
    return subprocess.run(["bash", str(SCRIPT), *args], env=env, capture_output=True, text=True, timeout=300)


def base_args(**overrides):
    values = {
        "--panel": "http://panel.example:8000/",
        "--node": "npu-01",
        "--broker": "redis://panel.example:6379/0",
        "--python": sys.executable,
        "--unit": str(UNIT),
        **overrides,
    }
    return [item for key, value in values.items() if value is not None for item in (key, value)]


@pytest.mark.timeout(300)
def test_it_writes_agent_env_installs_the_package_in_a_venv_and_the_unit(tmp_path):
    wheel = tiny_agent_wheel(tmp_path)
    root = tmp_path / "root"
    done = run_script(*base_args(), "--token", "apj_abc-123", "--package", str(wheel), destdir=root)
    assert done.returncode == 0, done.stderr + done.stdout
    env_file = root / "etc/ascend-panel/agent.env"
    lines = env_file.read_text().splitlines()
    assert "ASCEND_PANEL_NODE_NAME=npu-01" in lines
    assert "CELERY_BROKER_URL=redis://panel.example:6379/0" in lines
    assert "ASCEND_PANEL_JOIN_TOKEN=apj_abc-123" in lines
    assert "ASCEND_PANEL_URL=http://panel.example:8000" in lines  # trailing slash dropped
    assert stat.S_IMODE(env_file.stat().st_mode) == 0o600  # holds the token and maybe a broker password
    venv_python = root / "opt/ascend-panel/venv/bin/python"
    imported = subprocess.run(
        [str(venv_python), "-c", "import workers.agent as a; print(a.AGENT)"],
        capture_output=True,
        text=True,
        cwd=tmp_path,  # not the repository, whose own workers/ would shadow the installed one
    )
    assert imported.stdout.strip() == "installed"
    assert (root / "etc/systemd/system/ascend-panel-agent.service").read_text() == UNIT.read_text()
    assert "not starting the unit" in done.stdout


def test_running_it_again_keeps_the_venv_and_drops_a_token_not_given(tmp_path):
    wheel = tiny_agent_wheel(tmp_path)
    root = tmp_path / "root"
    assert (
        run_script(*base_args(), "--token", "apj_first", "--package", str(wheel), destdir=root).returncode
        == 0
    )
    again = run_script(*base_args(), "--package", str(wheel), destdir=root)
    assert again.returncode == 0, again.stderr
    assert "ASCEND_PANEL_JOIN_TOKEN" not in (root / "etc/ascend-panel/agent.env").read_text()


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"--node": None}, "--node is required"),
        ({"--node": "bad name;rm"}, "--node must be 1-63 letters"),
        ({"--broker": "http://x"}, "--broker must be a redis://"),
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
