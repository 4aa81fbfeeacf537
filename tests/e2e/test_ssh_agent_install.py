"""The agent installed onto an SSH node over SSH, end to end: the central agent runs the panel's install
script on the node (a loopback sshd; files staged under DESTDIR), which downloads the agent package and unit
from the live panel and pip installs the package into a fresh venv with the machine's ordinary pip
configuration. Then the installed agent, started the way its unit starts it, registers with its join token
over the test Redis and the node becomes an agent node.

What does not run: systemd (SYSTEMD_OFFLINE=1; the test starts the unit's ExecStart itself) and sudo (the
test logs in as root, where the install needs none)."""

import asyncio
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from channels.db import database_sync_to_async

import tests.sshd
from tests.e2e.conftest import ssh_node_for, wait_finished
from workers import __version__
from workers.hosts import fetch_host_key_fingerprint

sshd_server = tests.sshd.sshd_server
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(900), pytest.mark.ssh]

REPO = Path(__file__).resolve().parents[2]
NODE = "ssh-installed"
INSTALL_TIMEOUT_S = 600
# The test's worker reads queues under its own key prefix (tests/conftest.py, _wired_to_redis); the installed
# agent gets the same prefix before it starts, the only thing it is told that agent.env does not say.
START_AGENT = (
    "import sys, workers.celery_app as c\n"
    "c.app.conf.broker_transport_options = {'global_keyprefix': sys.argv[1]}\n"
    "import workers.agent\n"
    "workers.agent.main([])\n"
)


def env_file(path: Path) -> dict[str, str]:
    lines = [line for line in path.read_text().splitlines() if line and not line.startswith("#")]
    return dict(line.split("=", 1) for line in lines)


async def poll_node(node, until, what, log: Path, timeout=120):
    for _ in range(int(timeout / 0.5)):
        await database_sync_to_async(node.refresh_from_db)()
        if until(node):
            return node
        await asyncio.sleep(0.5)
    tail = log.read_text(errors="replace")[-3000:]
    raise AssertionError(f"{node.name}: no {what} within {timeout}s; the agent's log ends:\n{tail}")


@pytest.fixture
def started_agents():
    """Installed agents the test starts; each is stopped (with the Celery worker it runs) at the end."""
    processes = []
    yield processes
    for process in processes:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


async def test_the_agent_installed_over_ssh_registers_and_takes_over_the_node(
    worker_with_central_agent,
    sshd_server,
    live_server,
    redis_url,
    test_prefix,
    tmp_path,
    started_agents,
    alice,
    settings,
):
    from panel.monitoring import services
    from panel.monitoring.metrics import store
    from panel.nodes.agents.trust import agent_key
    from panel.operations.models import Operation
    from panel.operations.node_operations import start_install_agent

    if os.geteuid() != 0:
        pytest.skip("the install runs under sudo -n for a non-root login, which this test cannot grant")
    host = tmp_path / "host"  # the node's / for everything the install writes
    sim_root = worker_with_central_agent.sim_root
    python_dir = Path(sys._base_executable).parent  # a Python 3.11 the script finds as python3.11
    node = await database_sync_to_async(ssh_node_for)(sshd_server, sim_root, NODE)
    node.ssh_host_key_fingerprint = await fetch_host_key_fingerprint(sshd_server.host, sshd_server.port)
    node.ssh_env = {
        "PATH": f"{python_dir}{os.pathsep}/usr/local/bin{os.pathsep}/usr/bin{os.pathsep}/bin",
        "DESTDIR": str(host),
        "SYSTEMD_OFFLINE": "1",
    }
    await database_sync_to_async(node.save)()

    settings.PANEL_AGENT_BROKER_URL = redis_url  # what the join answers the installed agent
    operation = await database_sync_to_async(start_install_agent)(node, panel_url=live_server.url, user=alice)
    await wait_finished(operation, timeout=INSTALL_TIMEOUT_S)

    settings_file = host / "etc/ascend-panel/agent.env"
    agent_env = env_file(settings_file)
    assert agent_env["ASCEND_PANEL_NODE_NAME"] == NODE
    assert agent_env["ASCEND_PANEL_URL"] == live_server.url
    assert agent_env["CELERY_BROKER_URL"] == redis_url
    await database_sync_to_async(node.refresh_from_db)()
    assert agent_env["ASCEND_PANEL_AGENT_KEY"] == agent_key(node).decode()  # traded for the join token
    assert "ASCEND_PANEL_JOIN_TOKEN" not in agent_env
    assert stat.S_IMODE(settings_file.stat().st_mode) == 0o600
    unit = (host / "etc/systemd/system/ascend-panel-agent.service").read_text()
    assert unit == (REPO / "deploy/ascend-panel-agent.service").read_text()
    logged = await database_sync_to_async(list)(operation.events.values_list("payload", flat=True))
    lines = [event.get("line", "") for event in logged]
    assert any("Installing the agent" in line for line in lines)
    token_sent = await database_sync_to_async(Operation.objects.get)(pk=operation.pk)
    assert "apj_" not in str(token_sent.task_kwargs)  # sealed for the central agent
    assert not any("apj_" in str(event) for event in logged)

    venv_python = host / "opt/ascend-panel/venv/bin/python"
    installed = subprocess.run(
        [
            str(venv_python),
            "-c",
            "import celery, workers; print(workers.__file__); print(workers.__version__)",
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,  # not the repository, whose own workers/ would shadow the installed one
        env={"PATH": os.environ["PATH"]},
        check=True,
    )
    where, version = installed.stdout.split()
    assert Path(where).is_relative_to(host / "opt/ascend-panel/venv")
    assert version == __version__

    # The unit's ExecStart, with agent.env as its EnvironmentFile and the sim host's tools and files.
    environment = {
        "PATH": f"{sim_root / 'bin'}{os.pathsep}{os.environ['PATH']}",
        "ASCEND_PANEL_HOST_ROOT": str(sim_root),
        "ASCEND_PANEL_ASCEND_ROOT": str(sim_root / "usr/local/Ascend"),
        "ASCEND_PANEL_SIM_ROOT": str(sim_root),
        "ASCEND_PANEL_HEARTBEAT_S": "1",
        **agent_env,
    }
    await database_sync_to_async(store.forget_node)(NODE)
    agent_log = tmp_path / "agent.log"
    with open(agent_log, "wb") as log:
        started_agents.append(
            subprocess.Popen(
                [str(venv_python), "-c", START_AGENT, f"{test_prefix}:"],
                cwd=host / "opt/ascend-panel",
                env=environment,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        )
    node = await poll_node(
        node, lambda n: n.transport == "agent", "registration of the installed agent", log=agent_log
    )
    assert node.agent_version == __version__
    assert node.effective_status == "online"
    services.nodes.forget()  # the ingest's node cache learns of the node's new life now
    for _ in range(240):
        latest = (await database_sync_to_async(store.read_latest)([NODE])).get(NODE)
        if latest and len(latest["npus"]) == 8:
            break
        await asyncio.sleep(0.5)
    else:
        raise AssertionError("no metrics from the installed agent")
    await database_sync_to_async(store.forget_node)(NODE)
