"""Integration tier: a real Celery worker (threads pool, in this process) consuming the panel queue and the
test node's agent queue, with a real Redis broker and channel layer; the worker's node with NPUs and a tiny
model for deployments. A real web server in front of them: tests/live_web.py."""

import contextlib
import importlib
import time
from datetime import UTC, datetime

import pytest

# Fixtures the tier's modules share, kept beside the helpers they go with.
from tests.deployment_helpers import kill_recorded_engines
from tests.deployment_helpers import reconcile_loop as reconcile_loop
from tests.live_web import live_web as live_web

TEST_NODE = "it-node"


def event_batch(operation, *events, final_seq=None) -> dict:
    """An agent's event batch for `operation`: events given as (seq, kind, payload)."""
    return {
        "operation_id": str(operation.id),
        "node": operation.node.name,
        "final_seq": final_seq,
        "events": [
            {
                "seq": seq,
                "time": datetime(2026, 1, 1, 0, 0, seq % 60, tzinfo=UTC).isoformat(),
                "kind": kind,
                "payload": payload,
            }
            for seq, kind, payload in events
        ],
    }


def ingest_as_its_node(batch: dict) -> list:
    """Store a batch as the panel does once its envelope verified: sent by the node the batch names."""
    from panel.nodes.models import Node
    from panel.operations.services import ingest_events

    return ingest_events(batch, sender=Node.objects.get(name=batch["node"]))


def wait_until_ended(operation, timeout=90):
    """`operation` reloaded once it reached a terminal status; fails after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        operation.refresh_from_db()
        if operation.is_terminal:
            return operation
        time.sleep(0.2)
    raise AssertionError(f"{operation} did not finish in {timeout} s")


@pytest.fixture(autouse=True)
def _an_empty_cache():
    """Each test starts with the panel's cache empty, as with its database: the tests' cache is this
    process's memory, and API throttle counts are keyed by user id, which a later test's users reuse (one
    test's flood of 2/min throttled the next file's user of the same id)."""
    from django.core.cache import caches
    from django.core.cache.backends.locmem import LocMemCache

    if isinstance(caches["default"], LocMemCache):  # never a Redis one a test configured: that would flush it
        caches["default"].clear()


@pytest.fixture(autouse=True)
def _a_channel_layer_of_its_own():
    """Each test gets a channel layer instance of its own: channels_redis keeps one receive lock per instance,
    bound to the event loop that first received, and a test that leaves a receive pending (a socket never
    disconnected) would leave it locked for every later test in this process."""
    import channels.layers

    channels.layers.channel_layers.backends.clear()
    yield
    channels.layers.channel_layers.backends.clear()


@pytest.fixture
def celery_worker(_wired_to_redis, transactional_db, monkeypatch, sim_host):
    """A worker serving queue `panel` and `node.it-node`, whose agent side sees a simulated A2 host."""
    from workers.task_names import PANEL_QUEUE, node_queue

    with in_process_worker(monkeypatch, sim_host, [PANEL_QUEUE, node_queue(TEST_NODE)]) as worker:
        yield worker


# The panel's and the agent's task modules: importing one registers its tasks with the app.
TASK_MODULES = ("panel.nodes.tasks", "panel.operations.tasks", "workers.tasks")


@contextlib.contextmanager
def in_process_worker(monkeypatch, sim_host, queues: list[str], *, also_registers=(), without_env=()):
    """A Celery worker (threads, in this process) serving `queues`, its agent side seeing a simulated A2 host
    named TEST_NODE (`worker.sim_root`); `also_registers`: task modules beyond TASK_MODULES, `without_env`:
    variables taken out of the environment first. The queues start empty."""
    from celery.contrib.testing.worker import start_worker

    from workers.celery_app import app

    for module in (*TASK_MODULES, *also_registers):
        importlib.import_module(module)
    root, env = sim_host(name=TEST_NODE)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    for variable in without_env:
        monkeypatch.delenv(variable, raising=False)
    purge_queues(app, queues)
    try:
        with start_worker(
            app,
            pool="threads",
            concurrency=4,
            perform_ping_check=False,
            queues=queues,
            loglevel="WARNING",
            shutdown_timeout=30,
        ) as worker:
            worker.sim_root = root
            yield worker
    finally:
        # A launch the worker finished while it shut down (up to shutdown_timeout) started its engine after
        # the test's own clean-up: one outlived tests/e2e/test_gateway.py by half an hour, holding its port.
        kill_recorded_engines(root)


def purge_queues(app, queues: list[str]) -> int:
    """Drop what earlier tests of this session left in `queues` (a batch for a node this test's database
    never had, a delivery whose operation is gone), so a new in-process worker starts on this test's work."""
    purged = 0
    with app.connection_for_write() as connection:
        for queue in queues:
            try:  # a channel each: on RabbitMQ a queue not declared yet is a 404 that closes the channel
                with connection.channel() as channel:
                    purged += channel.queue_purge(queue) or 0
            except connection.channel_errors:
                pass
    return purged


@pytest.fixture
def node_with_npus(celery_worker):
    """The worker's node with eight healthy NPUs; kills whatever engines a test left running on it."""
    from panel.nodes.models import Node, Npu
    from tests.deployment_helpers import kill_recorded_engines

    node = Node.objects.create(name=TEST_NODE, transport="agent")
    for logic_id in range(8):
        Npu.objects.create(
            node=node,
            npu_id=logic_id,
            chip_id=0,
            logic_id=logic_id,
            name="910B3",
            hbm_total_mb=65536,
            health="OK",
        )
    yield node
    kill_recorded_engines(celery_worker.sim_root)


@pytest.fixture
def tiny_model(tmp_path_factory):
    """(folder, facts) of a tiny llama model on this machine's disk."""
    from workers.models.inspect import inspect_model
    from workers.models.tiny import main as make_tiny

    folder = tmp_path_factory.mktemp("tiny-llama")
    assert make_tiny([str(folder), "--arch", "llama"]) == 0
    return folder, inspect_model(folder)


_SERVED_SCHEMA: dict = {}  # /api/schema/ as served, once per test process: it is the same for every test


@pytest.fixture
def openapi(charlie):
    """The API's schema document as a signed-in viewer gets it from /api/schema/, parsed (a copy of its own:
    generating and parsing it takes a second or two)."""
    import copy

    import yaml
    from django.test import Client

    if "document" not in _SERVED_SCHEMA:
        client = Client()
        client.force_login(charlie)
        response = client.get("/api/schema/")
        assert response.status_code == 200
        _SERVED_SCHEMA["document"] = yaml.safe_load(response.content)
    return copy.deepcopy(_SERVED_SCHEMA["document"])


@pytest.fixture
def rows(charlie):
    """One row of every kind a URL can name (tests/url_walk.py), for tests that walk every URL."""
    from tests.url_walk import one_row_of_each

    return one_row_of_each(charlie)


@pytest.fixture
def store(tmp_path, settings):
    """The package store under this test's data directory, seeded with the simulated host's packages."""
    from django.core.management import call_command

    settings.DATA_DIR = tmp_path / "panel-data"
    call_command("seed_sim_packages")


@pytest.fixture
def nodes_a_and_b(db):
    """Two nodes, A and B: the trust tests hold A's credential and try to act on B."""
    from panel.nodes.models import Node

    return Node.objects.create(name="node-a"), Node.objects.create(name="node-b")


@pytest.fixture
def a2():
    """sim-a2, a node with two healthy 910B3 NPUs (rows only: no agent behind it)."""
    from panel.core.domain.choices import NpuHealth
    from panel.nodes.models import Node, Npu

    node = Node.objects.create(name="sim-a2", address="127.0.0.1")
    for logic_id in range(2):
        Npu.objects.create(
            node=node,
            npu_id=logic_id,
            logic_id=logic_id,
            name="910B3",
            health=NpuHealth.OK,
            hbm_total_mb=65536,
        )
    return node


@pytest.fixture
def qwen(a2):
    """A small Qwen2 model (tests/wizard_steps.py's facts) and its ready copy on sim-a2."""
    from panel.catalog.models import Model, ModelArtifact
    from tests.wizard_steps import SMALL_QWEN

    model = Model.objects.create(name="qwen2.5-0.5b", facts=SMALL_QWEN)
    artifact = ModelArtifact.objects.create(model=model, node=a2, path="/models/qwen", ready=True)
    return model, artifact


@pytest.fixture
def moe_model(tmp_path):
    """A tiny DeepSeek-V2 (MLA, MoE) on disk and its catalog row: (model, folder)."""
    from panel.catalog.models import Model
    from workers.models.inspect import inspect_model
    from workers.models.tiny import main as make_tiny

    assert make_tiny([str(tmp_path / "ds"), "--arch", "deepseek_v2"]) == 0
    return Model.objects.create(name="tiny-ds", facts=inspect_model(tmp_path / "ds")), tmp_path / "ds"
