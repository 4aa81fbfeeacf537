"""Integration tier: a real Celery worker (threads pool, in this process) consuming the panel queue and the
test node's agent queue, with a real Redis broker and channel layer; the worker's node with NPUs and a tiny
model for deployments. A real web server in front of them: tests/live_web.py."""

from datetime import UTC, datetime

import pytest

# The browser tier's live panel (panel.run's programs, agents on the simulated hosts) for the CLI tests, one
# for the whole session. Imported here once: each module importing it got a panel of its own, whose agents
# shared queue names and the Redis database with the first one's and took each other's tasks.
from tests.browser.conftest import live_panel as browser_tier_panel  # noqa: F401  (a fixture)

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
    from panel.operations.services import ingest_events

    return ingest_events(batch, sender=batch["node"])


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
    from celery.contrib.testing.worker import start_worker

    import panel.nodes.tasks  # noqa: F401  registers the panel tasks
    import panel.operations.tasks  # noqa: F401
    import workers.tasks  # noqa: F401  registers the agent tasks
    from workers.celery_app import app
    from workers.task_names import PANEL_QUEUE, node_queue

    root, env = sim_host(name=TEST_NODE)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("ASCEND_PANEL_NODE_NAME", TEST_NODE)
    queues = [PANEL_QUEUE, node_queue(TEST_NODE)]
    purge_queues(app, queues)
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
