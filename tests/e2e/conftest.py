"""End-to-end tier: whole programs as an admin meets them, minutes each, so not in a contributor's `make
test` (`make test-e2e`; CI runs it in test-all): `make run` and Ctrl-C, the CLI against a live panel, nodes
inventoried and agents installed over a real sshd, models copied over it, the /v1 gateway in front of engines
the panel deployed while they roll, scale and die, the gateway (panel.web) in front of sim engine processes
that fail over, hand KV from prefill to decode and are routed by prefix or session, two beat processes
handing over, `?wait=` and `?watch=` on a live web server while engines start, stop and fail, deployments in
real podman containers, a stack installed to its end (a venv and pip on the sim host), and
deploy/install-agent.sh building the agent's venv.

The integration tier's fixtures apply here as there: its in-process worker and node with NPUs, the package
store, an empty cache, gateway keys and a channel layer of its own per test, the browser tier's live panel
for the CLI."""

import asyncio
import json
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
from tests.integration.conftest import store as store
from tests.live_web import live_web as live_web
from tests.sim_engine_process import free_port, start_engine, stop, wait_healthy

__all__ = ["browser_tier_panel"]


@pytest.fixture
def own_ports(settings):
    """Engines of this test on a port pair no other test process picks."""
    settings.PANEL_DEPLOY_BASE_PORT = free_port_pair()


def start_pd_role(name: str, role: str, engine_id: str | None = None, delay: str = "0.002"):
    """A sim engine as a PD prefill or decode, its KV handed over TCP; (port, process) once healthy."""
    port, kv_port = free_port(), free_port()
    config = {
        "kv_connector": "NixlConnector",
        "kv_role": "kv_producer" if role == "prefill" else "kv_consumer",
        "engine_id": engine_id or name,
        "kv_port": kv_port,
    }
    process = start_engine(
        port, "--kv-transfer-config", json.dumps(config), env={"SIM_ENGINE_TOKEN_DELAY": delay}
    )
    wait_healthy(f"http://127.0.0.1:{port}", process)
    return port, process


@pytest.fixture
def pd_engines(fresh_gateway_state, request):
    """qwen-pd (prefill), qwen-pd-r2 (prefill), qwen-pd-d1, qwen-pd-d2 (decode): sim engines serving
    `qwen`, each a row with its role; yields {name: (row, process, port)}. A test's `impostor` marker
    starts qwen-pd with another engine id than its row's name (its params then name the wrong engine)."""
    from panel.catalog.models import Model
    from panel.core.domain.choices import DeploymentState, DesiredState
    from panel.deployments.models import Deployment

    impostor = getattr(request, "param", None) == "impostor"
    model = Model.objects.create(name="qwen-pd-model")
    found, primary = {}, None
    layout = [
        ("qwen-pd", "prefill"),
        ("qwen-pd-r2", "prefill"),
        ("qwen-pd-d1", "decode"),
        ("qwen-pd-d2", "decode"),
    ]
    for name, role in layout:
        engine_id = "someone-else" if impostor and name == "qwen-pd" else None
        port, process = start_pd_role(name, role, engine_id, delay="0.05" if role == "decode" else "0.002")
        row = Deployment.objects.create(
            name=name, model=model, role=role, replica_of=primary,
            spec={"port": port, "served_model_name": "qwen"},
            desired_state=DesiredState.RUNNING, observed_state=DeploymentState.RUNNING,
        )  # fmt: skip
        primary = primary or row
        found[name] = (row, process, port)
    Deployment.objects.filter(pk=primary.pk).update(roles_wanted={"prefill": 2, "decode": 2})
    yield found
    for _row, process, _port in found.values():
        stop(process)


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
