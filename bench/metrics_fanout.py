"""Live metrics to browsers: websocket push against REST polling, on a real panel.

    .venv/bin/python bench/metrics_fanout.py [--nodes 32] [--clients 8] [--seconds 20] [--pool threads]

Starts an embedded redis-server, the web server (panel.web) and the panel worker (as `make run` does,
panel/run.py) on a scratch
database, then N simulated agents in a separate publisher process (real MetricBatch messages pushed to the
metrics inbox as agents push them, 1 Hz per node, spread over the second; the figures come from workers.sim
read through the sampler's own table parser, one reading per tick shared by all nodes so the publisher stays
cheap) and, one phase after the other:
  push:    K websocket clients subscribed to every node group;
  polling: K clients asking GET /api/v1/metrics/latest/ (every node in one answer, as the dashboard's
           back-fill does) once a second.
Latency is sample time on the agent → frame (or response) received, for samples taken inside the measured
window. Lost frames: for every node, the sequence numbers any push client saw in the window are what was
sent; each client's missing ones count (a client whose socket dies loses the rest). Panel CPU is user +
system seconds of the web and worker processes during each phase, ingest included; "ingest_cpu_s" is the
same over a phase with no clients, what both ways pay before delivering anything. The bench's own CPU
(clients, publisher) and redis-server's are reported on stderr, apart. The last line is JSON.
"""

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import httpx
import psutil
import websockets

from panel import web
from workers.sim.profiles import get_profile

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
PYTHON = sys.executable
PROFILE = "atlas-800i-a2"
GRACE_S = 3  # after the window, frames of samples taken inside it may still be on their way
SETUP = """
from django.contrib.auth import get_user_model
from panel.accounts.models import ApiToken
import json
from panel.nodes.models import Node
from panel.nodes.trust import agent_key
user = get_user_model().objects.create_superuser("bench", password="bench-password-1")
keys = {{}}
for i in range({nodes}):
    node = Node.objects.create(name=f"bench-{{i:02d}}", transport="agent")
    keys[node.name] = agent_key(node).decode()
print(json.dumps(keys))
print(ApiToken.issue(user, "bench")[1])
"""


def node_names(nodes: int) -> list[str]:
    return [f"bench-{i:02d}" for i in range(nodes)]


class Panel:
    """redis-server, the web server, the panel worker and the publisher on a scratch directory; stopped
    together."""

    def __init__(self, nodes: int, pool: str, concurrency: int):
        from panel.run import Supervisor, free_port, panel_worker_argv, start_embedded_redis, wait_for_port

        self.dir = Path(tempfile.mkdtemp(prefix="bench-metrics-"))
        env = dict(os.environ, PANEL_MODE="run", DEBUG="0", PANEL_DATA_DIR=str(self.dir), LOG_LEVEL="WARNING")
        self.supervisor = Supervisor(env)
        self.redis_url = env["REDIS_URL"] = start_embedded_redis(self.supervisor, self.dir, quiet=True)
        self.redis = psutil.Process(self.supervisor.children[0][1].pid)
        self.supervisor.run_once([PYTHON, "manage.py", "migrate", "-v", "0"])
        out = subprocess.run(
            [PYTHON, "manage.py", "shell", "-c", SETUP.format(nodes=nodes)],
            cwd=REPO,
            env=env,
            check=True,
            capture_output=True,
            text=True,
        )
        *_, keys, self.token = out.stdout.strip().splitlines()
        self.web_port = free_port()
        server = self.supervisor.start(
            "web",
            web.argv("127.0.0.1", self.web_port, PYTHON),
            quiet=True,
        )
        worker = self.supervisor.start("panel-worker", panel_worker_argv(pool, concurrency), quiet=True)
        # The agents sign their batches with their nodes' credentials, as real agents do.
        publisher = self.supervisor.start(
            "agents",
            [PYTHON, __file__, "--publish", "--nodes", str(nodes)],
            env={"BENCH_AGENT_KEYS": keys},
            quiet=True,
        )
        wait_for_port(self.web_port, timeout=60)
        self.processes = [psutil.Process(server.pid), psutil.Process(worker.pid)]
        self.publisher = psutil.Process(publisher.pid)

    def cpu_seconds(self) -> dict[str, float]:
        def used(processes):
            return sum(t.user + t.system for t in (p.cpu_times() for p in processes))

        return {
            "panel": used(self.processes),
            "web": used(self.processes[:1]),
            "worker": used(self.processes[1:]),
            "redis": used([self.redis]),
            "publisher": used([self.publisher]),
            "clients": used([psutil.Process()]),
        }

    def stop(self) -> None:
        self.supervisor.stop()


def publish(nodes: int) -> None:
    """The simulated agents (run in their own process by `--publish`): one MetricBatch per node per second."""
    from workers import metrics_inbox
    from workers.ascend.npu_smi import parse_mapping, parse_table
    from workers.celery_app import app
    from workers.contracts import MetricBatch, MetricSample, utcnow
    from workers.identity import use_keys
    from workers.sampler import npu_samples, read_host
    from workers.sim import npu_smi_render, readings, state

    app.conf.broker_url = os.environ["REDIS_URL"]
    use_keys({name: key.encode() for name, key in json.loads(os.environ["BENCH_AGENT_KEYS"]).items()})
    profile = get_profile(PROFILE)
    sim_state = state.new_state(profile.name, "bench")
    mapping = parse_mapping(npu_smi_render.render_mapping(profile))
    logic = {(m["npu_id"], m["chip_id"]): m["logic_id"] for m in mapping}
    names = node_names(nodes)
    seq, slot = 0, 1.0 / len(names)
    next_at = time.monotonic()
    while True:
        seq += 1
        text = npu_smi_render.render_table(profile, readings.read_chips(profile, sim_state, time.time()))
        sample = MetricSample(time=utcnow(), host=read_host(), npus=npu_samples(parse_table(text), logic))
        batch = MetricBatch(node="-", samples=[sample], seq=seq)
        for name in names:
            now = utcnow()
            batch.samples[0].time = batch.sent_at = now  # the figures are shared, the times are not
            batch.node = name
            metrics_inbox.push(batch)
            next_at += slot
            time.sleep(max(0.0, next_at - time.monotonic()))


def sample_epoch(iso: str) -> float:
    return datetime.fromisoformat(iso).replace(tzinfo=UTC).timestamp()


class Window:
    """The measured stretch of wall-clock time; samples taken inside it are the ones that count."""

    def __init__(self):
        self.start = self.end = float("inf")

    def holds(self, epoch: float) -> bool:
        return self.start <= epoch <= self.end


async def push_client(url: str, token: str, names: list[str], window: Window, stop, ready, got: dict) -> None:
    """Records, per node, the sequence numbers and latencies (ms) of in-window frames. `ready` is set once
    the panel confirmed the subscription (the permission checks take a while on a busy machine)."""
    origin = url.replace("ws://", "http://").removesuffix("/ws/")
    headers = {"Authorization": f"Bearer {token}"}
    async with websockets.connect(url, additional_headers=headers, origin=origin, max_size=None) as ws:
        await ws.send(json.dumps({"type": "subscribe", "groups": [f"node.{n}" for n in names]}))
        while not stop.is_set():
            try:
                raw = await asyncio.wait_for(ws.recv(), 0.5)
            except TimeoutError:
                continue
            arrived = time.time()
            data = json.loads(raw)
            for message in data if isinstance(data, list) else [data]:  # frames come several to a message
                if message.get("type") == "subscribed":
                    ready.set()
                if message.get("type") != "metrics":
                    continue
                taken = sample_epoch(message["time"])
                if window.holds(taken):
                    got.setdefault(message["node"], {})[message["seq"]] = (arrived - taken) * 1000


async def poll_client(base: str, token: str, window: Window, stop, ready, got: dict) -> None:
    """One GET of every node's latest message a second; records the latency of each new in-window sample."""
    headers = {"Authorization": f"Bearer {token}"}
    async with httpx.AsyncClient(base_url=base, headers=headers, timeout=30) as client:
        while not stop.is_set():
            started = time.monotonic()
            response = await client.get("/api/v1/metrics/latest/")
            arrived = time.time()
            response.raise_for_status()
            ready.set()
            for name, message in response.json()["nodes"].items():
                taken = sample_epoch(message["time"])
                if window.holds(taken):
                    got.setdefault(name, {}).setdefault(message["seq"], (arrived - taken) * 1000)
            await asyncio.sleep(max(0.0, 1.0 - (time.monotonic() - started)))


async def phase(panel: Panel, kind: str, clients: int, names: list[str], warmup: float, seconds: float):
    """Runs K clients of `kind`; returns (what each client got per node, CPU seconds used in the window)."""
    window, stop = Window(), asyncio.Event()
    received: list[dict] = [{} for _ in range(clients)]
    ready = [asyncio.Event() for _ in range(clients)]
    if kind == "push":
        url = f"ws://127.0.0.1:{panel.web_port}/ws/"
        runs = [
            push_client(url, panel.token, names, window, stop, ready[i], received[i]) for i in range(clients)
        ]
    else:
        base = f"http://127.0.0.1:{panel.web_port}"
        runs = [poll_client(base, panel.token, window, stop, ready[i], received[i]) for i in range(clients)]
    tasks = [asyncio.create_task(run) for run in runs]
    started = time.monotonic()
    await asyncio.wait_for(asyncio.gather(*(event.wait() for event in ready)), 120)
    print(f"{kind}: {clients} clients ready after {time.monotonic() - started:.1f} s", file=sys.stderr)
    await asyncio.sleep(warmup)
    before = panel.cpu_seconds()
    window.start = time.time()
    await asyncio.sleep(seconds)
    window.end = time.time()
    after = panel.cpu_seconds()
    await asyncio.sleep(GRACE_S)
    stop.set()
    for failure in await asyncio.gather(*tasks, return_exceptions=True):
        if failure is not None:
            print(f"{kind} client failed: {failure!r}", file=sys.stderr)
    return received, {key: after[key] - before[key] for key in after}


def lost_frames(received: list[dict]) -> int:
    """Per node, every sequence number from the first to the last that any client saw was sent; count the
    ones each client is missing."""
    lost = 0
    for node in {node for got in received for node in got}:
        seen = {seq for got in received for seq in got.get(node, {})}
        expected = set(range(min(seen), max(seen) + 1))
        lost += sum(len(expected - set(got.get(node, {}))) for got in received)
    return lost


def latencies(received: list[dict]) -> list[float]:
    return [ms for got in received for per_node in got.values() for ms in per_node.values()]


def quantile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[int(q * 100) - 1]


def cpu_line(label: str, cpu: dict) -> str:
    figures = ", ".join(f"{key} {seconds:.2f}" for key, seconds in cpu.items())
    return f"{label} CPU s: {figures}"


async def main_async(args) -> dict:
    panel = Panel(args.nodes, args.pool, args.concurrency)
    names = node_names(args.nodes)
    try:
        await asyncio.sleep(args.warmup)  # start-up work is nobody's cost
        idle = panel.cpu_seconds()
        await asyncio.sleep(args.seconds)
        ingest_only = {key: value - idle[key] for key, value in panel.cpu_seconds().items()}
        push, push_cpu = await phase(panel, "push", args.clients, names, args.warmup, args.seconds)
        polling, polling_cpu = await phase(panel, "polling", args.clients, names, args.warmup, args.seconds)
    finally:
        panel.stop()
    lat, polled = latencies(push), latencies(polling)
    ingest_per_s = ingest_only["panel"] / args.seconds
    print(
        f"{cpu_line(f'ingest only ({args.seconds:.0f} s, no clients)', ingest_only)}\n"
        f"{cpu_line(f'push ({args.seconds:.0f} s)', push_cpu)}\n"
        f"{cpu_line(f'polling ({args.seconds:.0f} s)', polling_cpu)}\n"
        f"push frames {len(lat)} (expected {args.clients * args.nodes * args.seconds:.0f}); polling: "
        f"{len(polled)} new samples seen, p50 {quantile(polled, 0.5):.0f} ms "
        f"p99 {quantile(polled, 0.99):.0f} ms; "
        f"panel CPU above ingest alone: push {push_cpu['panel'] - ingest_per_s * args.seconds:.2f} s, "
        f"polling {polling_cpu['panel'] - ingest_per_s * args.seconds:.2f} s; load {os.getloadavg()[0]:.1f}",
        file=sys.stderr,
    )
    return {
        "nodes": args.nodes,
        "npus": args.nodes * len(get_profile(PROFILE).chips),
        "clients": args.clients,
        "p50_ms": round(quantile(lat, 0.50), 1),
        "p95_ms": round(quantile(lat, 0.95), 1),
        "p99_ms": round(quantile(lat, 0.99), 1),
        "lost_frames": lost_frames(push),
        "panel_cpu_s": round(push_cpu["panel"], 2),
        "polling_panel_cpu_s": round(polling_cpu["panel"], 2),
        # What both ways pay before any client: storing and alerting on the agents' batches.
        "ingest_cpu_s": round(ingest_only["panel"], 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=int, default=32)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=20, help="measured seconds per phase")
    parser.add_argument("--warmup", type=float, default=5)
    parser.add_argument("--pool", default="threads", help="panel worker pool (threads, solo, prefork)")
    parser.add_argument("--concurrency", type=int, default=4, help="panel worker pool size")
    parser.add_argument("--publish", action="store_true", help=argparse.SUPPRESS)  # the agents' process
    args = parser.parse_args()
    if args.publish:
        publish(args.nodes)
        return
    print(json.dumps(asyncio.run(main_async(args))))


if __name__ == "__main__":
    main()
