"""The ask before run (workers.asking) on the SSH path, end to end: a real central agent process, holding
only its own key and broker user, serves an SSH node on a real sshd, over the real broker. An operation the
panel failed before the central agent picked it up opens no SSH session on the host and runs nothing; a
wanted one runs there."""

import asyncio
import json
import os
import subprocess
import sys

import pytest

from tests.conftest import REPO
from tests.deployment_helpers import wait_for
from tests.security.central_agent import central_agent_process, central_credential
from tests.security.test_ask_before_run import deliveries_held_back, release, wait_ended
from workers.hosts import fetch_host_key_fingerprint

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(180), pytest.mark.ssh]


@pytest.fixture
def central_agent(tmp_path):
    credential = central_credential(tmp_path / "credential")
    state = tmp_path / "central-state"
    with central_agent_process(credential, state) as log_path:
        yield state, log_path


@pytest.fixture
def ssh_node(restartable_sshd, sim_host):
    """An SSH node on the test's sshd, its host key confirmed, whose commands see a simulated A2 host."""
    from panel.nodes.agents.ssh import sealed_credentials
    from panel.nodes.models import Node

    sshd = restartable_sshd.server
    root, _env = sim_host(name="ssh-asked")
    return Node.objects.create(
        name="ssh-asked",
        transport="ssh",
        status="online",
        address=sshd.host,
        ssh_port=sshd.port,
        ssh_username=sshd.username,
        ssh_secret=sealed_credentials(client_key=sshd.client_key_pem),
        ssh_host_key_fingerprint=asyncio.run(fetch_host_key_fingerprint(sshd.host, sshd.port)),
        ssh_env={"PATH": f"{root / 'bin'}{os.pathsep}{os.environ['PATH']}"},
        ssh_host_root=str(root),
        ssh_ascend_root=str(root / "usr" / "local" / "Ascend"),
    )


def sessions_on(sshd) -> int:
    """Logins the host's sshd accepted (LogLevel VERBOSE says each)."""
    return (sshd.server.workdir / "sshd.log").read_text().count("Accepted publickey")


def lease_record(state, operation) -> dict:
    path = state / "operations" / f"{operation.id}.json"
    return json.loads(path.read_text()) if path.exists() else {}


def test_an_ssh_operation_failed_before_the_central_agent_took_it_runs_nothing_on_the_host(
    panel_worker,
    central_agent,
    ssh_node,
    restartable_sshd,
    monkeypatch,
    alice,
):
    from panel.operations.node_operations import start_inventory
    from panel.operations.reaper import force_fail

    state, log_path = central_agent
    logins_before = sessions_on(restartable_sshd)  # the fingerprint read above logs in nobody
    with deliveries_held_back(monkeypatch) as held:
        stuck = start_inventory(ssh_node)
        wait_for(lambda: held, 10, "the operation to be sent")
    assert force_fail(stuck, alice, "given up before the central agent took it")

    release(held, 0)  # still signed and fresh: only the ask stops it
    wait_for(
        lambda: lease_record(state, stuck).get("finished"),
        60,
        f"the central agent to take up the delivery ({log_path.read_text()[-2000:]})",
    )

    assert lease_record(state, stuck)["finished"] == "ended on the panel"
    stuck.refresh_from_db()
    assert stuck.status == "failed"
    assert [(e.kind, e.payload) for e in stuck.events.all()] == [("state", {"state": "running"})]
    assert sessions_on(restartable_sshd) == logins_before
    assert ssh_node.npus.count() == 0


def test_a_wanted_ssh_operation_runs_on_the_host(
    panel_worker,
    central_agent,
    ssh_node,
    restartable_sshd,
):
    from panel.operations.node_operations import start_inventory

    _state, log_path = central_agent
    operation = start_inventory(ssh_node)
    done = wait_ended(operation, timeout=120)
    assert done.status == "succeeded", (done.error, log_path.read_text()[-3000:])
    assert sessions_on(restartable_sshd) >= 1
    assert ssh_node.npus.count() == 8
    assert "refused task" not in log_path.read_text()


def test_the_central_agent_refuses_to_start_with_the_panels_key_material(tmp_path):
    """Backward compatibility: a central agent still given PANEL_SECRETS_KEY says what to set instead."""
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": str(REPO), "PANEL_SECRETS_KEY": "the-panels-material"}
    started = subprocess.run(
        [sys.executable, "-m", "workers.agent", "--central"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert started.returncode != 0
    assert "agent_credential --central" in started.stderr
    assert "PANEL_SECRETS_KEY" in started.stderr
