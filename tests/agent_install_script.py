"""deploy/install-agent.sh as its tests run it (tests/unit: refusals of bad arguments; tests/e2e: real
installs into a venv): under a DESTDIR with SYSTEMD_OFFLINE=1, against a stand-in for the panel's join
endpoint, with a dependency-free agent wheel pip installs offline."""

import hashlib
import http.server
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
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


def base_args(**overrides):
    values = {
        "--panel": "http://panel.example:8000/",
        "--node": "npu-01",
        "--python": sys.executable,
        "--unit": str(UNIT),
        **overrides,
    }
    return [item for key, value in values.items() if value is not None for item in (key, value)]


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()
