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

push_vs_poll, push_vs_poll_panel and push_vs_poll_all_in are bench/fleet.py's figures (CPU per delivered
sample, polling ÷ push: of the web process; of web and worker; of those and redis-server, which is here the
broker and the channel layer), so the two benches can be read side by side; `panel_cpu_ratio` is the plain
quotient of the two phases' panel CPU (not per sample), the figure this bench gave before.
docs/scaling.md ("Two benches, one question") says why their ratios differ.
"""

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.live_viewers import (  # noqa: E402
    Window,
    cpu_line,
    cpu_seconds,
    latencies,
    lost_frames,
    measure_window,
    poll_client,
    push_client,
    push_vs_poll,
    quantile,
)
from panel import web  # noqa: E402
from workers.sim.profiles import get_profile  # noqa: E402

PYTHON = sys.executable
PROFILE = "atlas-800i-a2"
SETUP = """
from django.contrib.auth import get_user_model
from panel.accounts.models import ApiToken
import json
from panel.nodes.models import Node
from panel.nodes.agents.trust import agent_key
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
        panel, redis = cpu_seconds(self.processes), cpu_seconds([self.redis])
        return {
            "panel": panel,
            "web": cpu_seconds(self.processes[:1]),
            "worker": cpu_seconds(self.processes[1:]),
            "redis": redis,
            "all_in": panel + redis,
            "publisher": cpu_seconds([self.publisher]),
            "clients": cpu_seconds([psutil.Process()], children=False),
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


async def phase(panel: Panel, kind: str, clients: int, names: list[str], warmup: float, seconds: float):
    """Runs K clients of `kind`; returns (what each client got per node, CPU seconds used in the window)."""
    window, stop = Window(), asyncio.Event()
    received: list[dict] = [{} for _ in range(clients)]
    ready = [asyncio.Event() for _ in range(clients)]
    if kind == "push":
        url = f"ws://127.0.0.1:{panel.web_port}/ws/"
        groups = [f"node.{n}" for n in names]
        runs = [
            push_client(url, panel.token, groups, window, stop, ready[i], received[i]) for i in range(clients)
        ]
    else:
        base = f"http://127.0.0.1:{panel.web_port}"
        runs = [
            poll_client(base, panel.token, None, window, stop, ready[i], received[i]) for i in range(clients)
        ]
    before, after = await measure_window(
        kind, runs, ready, window, stop, panel.cpu_seconds, warmup=warmup, seconds=seconds, ready_within=120
    )
    return received, {key: after[key] - before[key] for key in after}


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
        "panel_cpu_ratio": round(polling_cpu["panel"] / push_cpu["panel"], 2),
        **push_vs_poll((push, push_cpu), (polling, polling_cpu)),
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
