"""End-to-end tier: whole programs as an admin meets them, minutes each, so not in a contributor's `make
test` (`make test-e2e`; CI runs it in test-all): `make run` and Ctrl-C, the CLI against a live panel, nodes
inventoried and agents installed over a real sshd, models copied over it, the /v1 gateway in front of engines
the panel deployed while they roll, scale and die, two beat processes handing over.

The integration tier's fixtures apply here as there: its in-process worker and node with NPUs, an empty
cache and a channel layer of its own per test, the browser tier's live panel for the CLI."""

import asyncio
import os

import pytest
from channels.db import database_sync_to_async

# The browser tier's live panel (panel.run's programs, agents on the simulated hosts) for the CLI tests, one
# per test process: each module importing it got a panel of its own, whose agents shared queue names and the
# Redis database with the first one's and took each other's tasks.
from tests.browser.conftest import live_panel as browser_tier_panel
from tests.deployment_helpers import free_port_pair
from tests.deployment_helpers import reconcile_loop as reconcile_loop
from tests.gateway_helpers import live_gateway as live_gateway
from tests.integration.conftest import TEST_NODE, in_process_worker
from tests.integration.conftest import _a_channel_layer_of_its_own as _a_channel_layer_of_its_own
from tests.integration.conftest import _an_empty_cache as _an_empty_cache
from tests.integration.conftest import celery_worker as celery_worker
from tests.integration.conftest import node_with_npus as node_with_npus

__all__ = ["browser_tier_panel"]


@pytest.fixture
def own_ports(settings):
    """Engines of this test on a port pair no other test process picks."""
    settings.PANEL_DEPLOY_BASE_PORT = free_port_pair()


@pytest.fixture
def fresh_gateway_state(_wired_to_redis):
    """The session's Redis outlives each test's database: counters, limits and usage start empty."""
    from panel.gateway import store

    client = store.client()
    stale = list(client.scan_iter(f"{store.PREFIX}*"))
    if stale:
        client.delete(*stale)


@pytest.fixture
def gateway(live_gateway):
    """The module-scoped web server (tests/gateway_helpers.py), under a shorter name."""
    return live_gateway


@pytest.fixture
def tiny_model(tmp_path_factory):
    """(Model row, folder) of a tiny llama model the gateway tests deploy."""
    from panel.catalog.models import Model
    from workers.models.inspect import inspect_model
    from workers.models.tiny import main as make_tiny

    folder = tmp_path_factory.mktemp("tiny-llama")
    assert make_tiny([str(folder), "--arch", "llama"]) == 0
    return Model.objects.create(name="tiny-llama", facts=inspect_model(folder)), folder


@pytest.fixture
def worker_with_central_agent(_wired_to_redis, transactional_db, monkeypatch, settings, sim_host):
    """One worker serving the panel queue, the test node's agent queue and the central agent's queue
    (ssh-runner), holding the central key only (tests/conftest.py's agent_keys: no PANEL_SECRETS_KEY in the
    environment); the agent side sees a simulated A2 host."""
    from workers.sealing import PANEL_KEY_MATERIAL_VARS
    from workers.task_names import PANEL_QUEUE, SSH_RUNNER_QUEUE, node_queue

    with in_process_worker(
        monkeypatch,
        sim_host,
        [PANEL_QUEUE, node_queue(TEST_NODE), SSH_RUNNER_QUEUE],
        also_registers=("panel.monitoring.tasks",),
        without_env=PANEL_KEY_MATERIAL_VARS,
    ) as worker:
        yield worker


async def wait_finished(operation, timeout=120):
    # Polled from the event loop (as the operation-flow test does) so the worker's threads get the database.
    for _ in range(int(timeout / 0.2)):
        await database_sync_to_async(operation.refresh_from_db)()
        if operation.is_terminal:
            assert operation.status == "succeeded", (operation.error, operation.hint)
            return operation
        await asyncio.sleep(0.2)
    raise AssertionError(f"operation {operation.id} still {operation.status}")


def ssh_node_for(sshd, root, name):
    """An SSH node on sshd whose commands see the simulated host at root; its host key not yet confirmed."""
    from panel.nodes.agents.ssh import sealed_credentials
    from panel.nodes.models import Node

    return Node.objects.create(
        name=name,
        transport="ssh",
        address=sshd.host,
        ssh_port=sshd.port,
        ssh_username=sshd.username,
        ssh_secret=sealed_credentials(client_key=sshd.client_key_pem),
        ssh_env={"PATH": f"{root / 'bin'}{os.pathsep}{os.environ['PATH']}"},
        ssh_host_root=str(root),
        ssh_ascend_root=str(root / "usr" / "local" / "Ascend"),
    )
