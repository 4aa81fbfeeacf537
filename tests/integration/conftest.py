"""Integration tier: a real Celery worker (threads pool, in this process) consuming the panel queue and the
test node's agent queue, with a real Redis broker and channel layer."""

from datetime import UTC, datetime

import pytest

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
    with start_worker(
        app,
        pool="threads",
        concurrency=4,
        perform_ping_check=False,
        queues=[PANEL_QUEUE, node_queue(TEST_NODE)],
        loglevel="WARNING",
        shutdown_timeout=30,
    ) as worker:
        worker.sim_root = root
        yield worker
