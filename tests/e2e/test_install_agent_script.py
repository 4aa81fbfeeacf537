"""deploy/install-agent.sh, run for real under a DESTDIR with SYSTEMD_OFFLINE=1: the token on stdin traded
once for the node's credential, the package checked against its pinned sha256, agent.env, the venv with the
package installed, the unit file; refused tokens and packages install no credential. Each builds a venv and
pip-installs into it, so they are in the end-to-end tier; the refusals of bad arguments are in
tests/unit/test_install_agent_script.py."""

import os
import stat
import subprocess
import threading
from http.server import HTTPServer

import pytest

from tests.agent_install_script import (
    BROKER_CA,
    BROKER_URL,
    UNIT,
    JoinEndpoint,
    base_args,
    run_script,
    sha256,
    tiny_agent_wheel,
)


@pytest.fixture
def panel_url():
    JoinEndpoint.received = []
    JoinEndpoint.broker_ca_pem = BROKER_CA
    server = HTTPServer(("127.0.0.1", 0), JoinEndpoint)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_port}/"
    server.shutdown()


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
