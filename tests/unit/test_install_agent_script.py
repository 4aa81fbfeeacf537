"""deploy/install-agent.sh, run for real under a DESTDIR with SYSTEMD_OFFLINE=1: the token on stdin traded
once for the node's credential, the package checked against its pinned sha256, agent.env, the venv with the
package installed, the unit file; and clear refusals of bad arguments, tokens and packages."""

import hashlib
import http.server
import json
import os
import stat
import subprocess
import sys
import threading
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


def run_script(*args, destdir: Path, token: str | None = None):
    env = {**os.environ, "DESTDIR": str(destdir), "SYSTEMD_OFFLINE": "1", "PIP_NO_INDEX": "1"}
    env.pop("ASCEND_PANEL_JOIN_TOKEN", None)
    env.pop("PYTHONPATH", None)  # the venv must import its installed package, not this checkout's workers/
    return subprocess.run(
        ["bash", str(SCRIPT), *args],
        env=env,
        input=f"{token}\n" if token else "",
        capture_output=True,
        text=True,
        timeout=300,
    )


BROKER_URL = "amqps://node.npu-01:s3cret@panel.example:5671/ascend"
BROKER_CA = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"


class JoinEndpoint(http.server.BaseHTTPRequestHandler):
    """The panel's POST /nodes/agent/join/ as the script sees it (the real one: tests/integration)."""

    received: list[dict] = []
    broker_ca_pem = BROKER_CA  # what the join answers carry; None: the panel has no CA of its own

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        JoinEndpoint.received.append({"path": self.path, **body})
        if body["token"] != "apj_good-token":
            answer, status = {"detail": "this join token is unknown, already used, expired"}, 403
        else:
            answer, status = {"agent_key": "k" * 64, "broker_url": BROKER_URL}, 200
            if JoinEndpoint.broker_ca_pem:
                answer["broker_ca_pem"] = JoinEndpoint.broker_ca_pem
        data = json.dumps(answer).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


@pytest.fixture
def panel_url():
    JoinEndpoint.received = []
    JoinEndpoint.broker_ca_pem = BROKER_CA
    server = http.server.HTTPServer(("127.0.0.1", 0), JoinEndpoint)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_port}/"
    server.shutdown()


def base_args(**overrides):
    values = {
        "--panel": "http://panel.example:8000/",
        "--node": "npu-01",
        "--python": sys.executable,
        "--unit": str(UNIT),
        **overrides,
    }
    return [item for key, value in values.items() if value is not None for item in (key, value)]


def joined(token: str) -> dict:
    return {"path": "/nodes/agent/join/", "node": "npu-01", "token": token}


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.timeout(300)
def test_it_trades_the_token_on_stdin_for_the_credential_and_installs_the_checked_package(
    tmp_path, panel_url
):
    wheel = tiny_agent_wheel(tmp_path)
    root = tmp_path / "root"
    args = base_args(**{"--panel": panel_url}, **{"--package-sha256": sha256(wheel)})
    done = run_script(*args, "--package", str(wheel), destdir=root, token="apj_good-token")
    assert done.returncode == 0, done.stderr + done.stdout
    assert JoinEndpoint.received == [
        {"path": "/nodes/agent/join/", "node": "npu-01", "token": "apj_good-token"}
    ]
    env_file = root / "etc/ascend-panel/agent.env"
    lines = env_file.read_text().splitlines()
    assert "ASCEND_PANEL_NODE_NAME=npu-01" in lines
    assert f"CELERY_BROKER_URL={BROKER_URL}" in lines  # the node's own broker user, from the panel's answer
    assert not any("redis" in line.lower() for line in lines)  # never the panel's Redis
    assert "ASCEND_PANEL_BROKER_CA_FILE=/etc/ascend-panel/broker-ca.pem" in lines  # pinned
    assert (root / "etc/ascend-panel/broker-ca.pem").read_text() == BROKER_CA
    assert f"ASCEND_PANEL_AGENT_KEY={'k' * 64}" in lines
    assert f"ASCEND_PANEL_URL={panel_url.rstrip('/')}" in lines  # trailing slash dropped
    assert not any("JOIN_TOKEN" in line for line in lines)  # used once, never kept
    assert stat.S_IMODE(env_file.stat().st_mode) == 0o600  # holds the credential and maybe a broker password
    venv_python = root / "opt/ascend-panel/venv/bin/python"
    imported = subprocess.run(
        [str(venv_python), "-c", "import workers.agent as a; print(a.AGENT)"],
        capture_output=True,
        text=True,
        cwd=tmp_path,  # not the repository, whose own workers/ would shadow the installed one
        env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},  # nor through PYTHONPATH
    )
    assert imported.stdout.strip() == "installed"
    assert (root / "etc/systemd/system/ascend-panel-agent.service").read_text() == UNIT.read_text()
    assert "not starting the unit" in done.stdout

    again = run_script(*args, "--package", str(wheel), destdir=root)  # no token: an upgrade in place
    assert again.returncode == 0, again.stderr
    assert env_file.read_text().splitlines() == lines
    assert len(JoinEndpoint.received) == 1


@pytest.mark.timeout(300)
def test_a_join_whose_answer_has_no_ca_removes_the_one_pinned_before(tmp_path, panel_url):
    wheel = tiny_agent_wheel(tmp_path)
    root = tmp_path / "root"
    args = base_args(**{"--panel": panel_url}, **{"--package-sha256": sha256(wheel)})
    first = run_script(*args, "--package", str(wheel), destdir=root, token="apj_good-token")
    assert first.returncode == 0, first.stderr + first.stdout
    pinned = root / "etc/ascend-panel/broker-ca.pem"
    assert pinned.read_text() == BROKER_CA

    JoinEndpoint.broker_ca_pem = None  # the broker's certificate now comes from a CA the system trusts
    again = run_script(*args, "--package", str(wheel), destdir=root, token="apj_good-token")
    assert again.returncode == 0, again.stderr + again.stdout
    assert not pinned.exists()
    lines = (root / "etc/ascend-panel/agent.env").read_text().splitlines()
    assert not any(line.startswith("ASCEND_PANEL_BROKER_CA_FILE=") for line in lines)
    assert f"CELERY_BROKER_URL={BROKER_URL}" in lines


@pytest.mark.timeout(300)
def test_a_refused_token_and_a_tampered_package_install_no_credential(tmp_path, panel_url):
    wheel = tiny_agent_wheel(tmp_path)
    args = [*base_args(**{"--panel": panel_url}), "--package", str(wheel)]
    refused = run_script(*args, destdir=tmp_path / "a", token="apj_used-token")
    assert refused.returncode == 2
    assert "the panel refused to join" in refused.stderr
    assert not (tmp_path / "a/etc/ascend-panel/agent.env").exists()
    tampered = run_script(*args, "--package-sha256", "0" * 64, destdir=tmp_path / "b", token="apj_good-token")
    assert tampered.returncode == 2
    assert "does not match the sha256" in tampered.stderr
    assert not (tmp_path / "b/opt/ascend-panel/venv").exists()
    assert JoinEndpoint.received == [
        {"path": "/nodes/agent/join/", "node": "npu-01", "token": "apj_used-token"}
    ]


def test_without_a_token_or_an_earlier_credential_it_stops(tmp_path):
    wheel = tiny_agent_wheel(tmp_path)
    done = run_script(*base_args(), "--package", str(wheel), destdir=tmp_path)
    assert done.returncode == 2
    assert "pipe the join token" in done.stderr


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
