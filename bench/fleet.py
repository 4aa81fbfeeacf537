"""Scale on the real path: N agent nodes × 8 NPUs and K dashboards on the panel as production runs it.

    .venv/bin/python bench/fleet.py [--nodes 32] [--viewers 32] [--seconds 20] [--sweep]

Starts, on scratch state of its own: a PostgreSQL database on DATABASE_URL's server (bench_fleet_<hex>,
dropped afterwards), a vhost and panel user on the machine's RabbitMQ (the fleet broker; management API at
TEST_RABBITMQ_ADMIN_URL, deleted afterwards with every node user), the panel's Redis at REDIS_URL (give the
bench a database of its own), `python -m panel.web --workers W`, P panel workers and beat. Then one load
process (bench/fleet_agents.py) joins N nodes through POST /nodes/agent/join/, each with its own join token,
and plays them through their own broker users and keys: heartbeats, 1 Hz metric batches, the inventory every
new node gets, and operations streaming log lines.

Once every node has answered its inventory and the ingest queue drained what the start-up burst left there
(at most DRAIN_TIMEOUT_S), three windows of --seconds each:
  ingest:  no viewers; what the panel pays for the fleet alone;
  push:    K viewers hold a dashboard's websocket: the fleet summary plus the --on-screen nodes of their
           page (viewer i sees nodes i·S … i·S+S-1, wrapping), as static/js/dashboard.js subscribes;
  polling: the same K viewers ask GET /api/v1/metrics/latest/?node=… for their page once a second (the same
           freshness).
p99_ms: sample time on the agent → frame received, over the push window. lost: samples of on-screen nodes
the load handed the broker inside the window that a push viewer never got. panel_cpu_cores: CPU of web,
worker and beat processes (with their children) over the push window. db_rows_per_s: rows inserted, updated
or deleted in the bench's database (pg_stat_database) over all three windows. sample_hz: samples a second
per node the load managed to send (below 1 when the machine starves it). push_vs_poll: the web processes'
CPU per delivered sample, polling ÷ push (delivery is their work; "all_in": the panel's total CPU, ingest
included, per delivered sample). ingest_cpu_cores: the panel with no viewer. week_rows: metric history rows
a week of N nodes keeps (one row per NPU and one per host per minute for PANEL_METRICS_MINUTE_DAYS, one an
hour before that: panel.monitoring.metrics.rollup), retained_rows: what PANEL_METRICS_RETENTION_DAYS keeps;
week_gb from the bytes per row the downsampler's rows take in PostgreSQL here (null under 20,000 rows: too few
to tell). ingest_lag_ms: p50 and p99 of agent → panel alone (each node's last sample as the ingester took it
in, read once after the push window). ingest_backlog: heartbeats and event batches in the broker before the
first window and after the last.
Infrastructure CPU (RabbitMQ, Redis, PostgreSQL, the load, the viewers) goes to stderr. Last line: JSON.
"""

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import quote

import httpx
import psutil
import psycopg

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench import fleet_agents  # noqa: E402
from bench.live_viewers import (  # noqa: E402
    Window,
    cpu_line,
    cpu_seconds,
    delivered,
    latencies,
    measure_window,
    poll_client,
    push_client,
    quantile,
)
from panel import web  # noqa: E402
from panel.run import PYTHON, Supervisor, beat_argv, free_port, panel_worker_argv, wait_for_port  # noqa: E402
from tests.browser.fake_fleet import NPUS_PER_NODE  # noqa: E402
from tests.faults.stack import drop_database, own_database  # noqa: E402
from tests.rabbitmq import scratch_broker  # noqa: E402
from workers.topology import INGEST_QUEUE  # noqa: E402

SWEEP = (32, 128, 512)
SHARED_PROCESSES = {"beam.smp": "rabbitmq", "redis-server": "redis", "postgres": "postgres"}
# What the load's process must not hold: an agent has its join answer and nothing of the panel's.
AGENT_ENV = {
    name: "" for name in ("DATABASE_URL", "REDIS_URL", "PANEL_SECRETS_KEY", "PANEL_BROKER_ADMIN_URL")
}
SETTLE_TIMEOUT_S = 900
DRAIN_TIMEOUT_S = 600
MIN_ROWS_FOR_SIZE = 20_000
METRIC_TABLES = ("monitoring_npumetricminute", "monitoring_hostmetricminute")
SETUP = """
import json, os
from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from panel.accounts.bootstrap import ensure_role_groups
from panel.accounts.models import ApiToken
from panel.accounts.roles import VIEWER
from panel.nodes.agents.join import issue_join_token
ensure_role_groups()
User = get_user_model()
admin = User.objects.create_superuser("bench", password=None)
viewers = []
for i in range(int(os.environ["FLEET_VIEWERS"])):  # one person per dashboard: own account, own limits
    viewer = User.objects.create_user(f"viewer-{i:02d}", password=None)
    viewer.groups.add(Group.objects.get(name=VIEWER))
    viewers.append(ApiToken.issue(viewer, "dashboard")[1])
names = [f"{os.environ['FLEET_PREFIX']}-{i:03d}" for i in range(int(os.environ["FLEET_NODES"]))]
print(json.dumps({
    "token": ApiToken.issue(admin, "bench")[1],
    "viewer_tokens": viewers,
    "join_tokens": {name: issue_join_token(name) for name in names},
    "retention_days": settings.PANEL_METRICS_RETENTION_DAYS,
    "minute_days": settings.PANEL_METRICS_MINUTE_DAYS,
}))
"""


def history_rows(nodes: int, days: int, minute_days: int) -> int:
    """Metric history rows `days` of `nodes` leave in the tables: one per NPU and host a minute for the
    newest `minute_days`, one an hour before that (the hourly prune's fold,
    panel.monitoring.metrics.rollup)."""
    series = nodes * (NPUS_PER_NODE + 1)
    at_minutes = min(days, minute_days)
    return series * (at_minutes * 24 * 60 + (days - at_minutes) * 24)


class Fleet:
    """The panel's processes on scratch PostgreSQL, RabbitMQ and Redis state, and the load; stopped and
    cleaned up together."""

    def __init__(self, args):
        self.args = args
        self.dir = Path(tempfile.mkdtemp(prefix="bench-fleet-"))
        self.shared_db_url = os.environ.get("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/postgres")
        self.broker = scratch_broker("bench-fleet")
        self.db_url, self.db_name = own_database(self.shared_db_url, "bench_fleet")
        from cryptography.fernet import Fernet

        self.env = dict(
            os.environ,
            PANEL_MODE="run",  # the local Redis has no password, which production mode refuses
            DEBUG="0",
            LOG_LEVEL="WARNING",
            PYTHONUNBUFFERED="1",
            PANEL_DATA_DIR=str(self.dir),
            DATABASE_URL=self.db_url,
            REDIS_URL=args.redis_url,
            CELERY_BROKER_URL=self.broker.panel_url,
            PANEL_BROKER_ADMIN_URL=self.broker.admin_url,
            PANEL_AGENT_BROKER_URL=self.broker.agent_url,
            PANEL_SECRETS_KEY=Fernet.generate_key().decode(),
            PANEL_BEAT_KEY=f"bench-fleet:{self.broker.suffix}:beat",
            # Node users are broker-wide: node names carry the vhost's suffix, so its close() finds them.
            FLEET_PREFIX=f"f{self.broker.suffix}",
            FLEET_NODES=str(args.nodes),
            FLEET_VIEWERS=str(args.viewers),
        )
        self.supervisor = Supervisor(self.env, log_dir=self.dir / "logs")
        self.names = [f"{self.env['FLEET_PREFIX']}-{i:03d}" for i in range(args.nodes)]
        self.panel: list[psutil.Process] = []

    def start(self) -> "Fleet":
        args = self.args
        self.supervisor.run_once([PYTHON, "manage.py", "migrate", "-v", "0"])
        output = self.supervisor.run_once([PYTHON, "manage.py", "shell", "-c", SETUP], capture=True)
        setup = json.loads(output.strip().splitlines()[-1])  # after whatever start-up printed
        self.token, self.retention_days = setup["token"], setup["retention_days"]
        self.minute_days = setup["minute_days"]
        self.viewer_tokens = setup["viewer_tokens"]
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        argv = [
            *web.argv("127.0.0.1", self.port, PYTHON),
            "--workers",
            str(args.web_workers),
            "--no-access-log",
        ]
        self.panel.append(psutil.Process(self.supervisor.start("web", argv).pid))
        for index in range(args.panel_workers):
            argv = panel_worker_argv("threads", args.worker_threads, name=f"panel{index}")
            self.panel.append(psutil.Process(self.supervisor.start(f"panel-worker-{index}", argv).pid))
        beat = beat_argv(self.dir / "celerybeat-schedule")
        self.panel.append(psutil.Process(self.supervisor.start("beat", beat).pid))
        wait_for_port(self.port, timeout=120)
        spec = self.dir / "spec.json"
        spec.write_text(json.dumps({"panel": self.base, "tokens": setup["join_tokens"]}))
        spec.chmod(0o600)  # join tokens
        self.sent = self.dir / "sent.txt"
        load = [
            *(PYTHON, __file__, "--agents", "--spec", str(spec), "--sent", str(self.sent)),
            *("--operations", str(args.operations), "--log-lines", str(args.log_lines)),
            *("--heartbeat-s", str(args.heartbeat_s)),
        ]
        self.load = psutil.Process(
            self.supervisor.start("load", load, env=AGENT_ENV | self.agent_broker()).pid
        )
        self.wait_settled()
        self.wait_drained()
        return self

    def ingest_backlog(self) -> int:
        """Heartbeats and event batches waiting in the broker for a panel worker."""
        vhost = quote(self.broker.vhost, safe="")
        answer = self.broker.api("GET", f"/api/queues/{vhost}/{INGEST_QUEUE}")
        return int(answer.json().get("messages", 0)) if answer.status_code == 200 else -1

    def ingest_lag_ms(self) -> list[float]:
        """Each node's last sample: from its time on the agent to the ingester's taking it in (the panel's
        `ascend_panel_ingest_lag_seconds`, scraped from loopback, which PANEL_METRICS_ALLOW admits). The part
        of agent → browser that is spent before the panel's fan-out."""
        answer = httpx.get(f"{self.base}/metrics", timeout=60)
        answer.raise_for_status()
        prefix = "ascend_panel_ingest_lag_seconds{"
        return [
            float(line.rsplit(" ", 1)[1]) * 1000
            for line in answer.text.splitlines()
            if line.startswith(prefix)
        ]

    def wait_drained(self) -> None:
        """Until the start-up burst's heartbeats and events left the ingest queue (at most DRAIN_TIMEOUT_S):
        the windows measure the steady fleet, not the catching up. A panel that never drains it is short of
        capacity, which the JSON line's backlog figures show."""
        started, limit = time.monotonic(), max(50, self.args.nodes // 10)
        while time.monotonic() - started < DRAIN_TIMEOUT_S and self.ingest_backlog() > limit:
            time.sleep(2)
        took, left = time.monotonic() - started, self.ingest_backlog()
        print(f"ingest backlog {left} after {took:.0f} s of draining", file=sys.stderr, flush=True)

    def agent_broker(self) -> dict:
        """The load's broker URL: the vhost with no user in it, so nothing of it can talk as the panel
        (each played node connects with the user its join answer gave it)."""
        return {"CELERY_BROKER_URL": self.broker.agent_url}

    def wait_settled(self) -> None:
        """Until every node joined and its inventory ended or streams (the start-up burst is nobody's
        steady cost)."""
        started = time.monotonic()
        headers = {"Authorization": f"Bearer {self.token}"}
        with httpx.Client(base_url=self.base, headers=headers, timeout=30) as client:
            while time.monotonic() - started < SETTLE_TIMEOUT_S:
                if self.supervisor.watch():
                    raise SystemExit(f"{self.supervisor.watch()} exited; see {self.dir / 'logs'}")
                found = client.get("/api/v1/operations/", params={"kind": "inventory", "page_size": 1})
                pending = client.get(
                    "/api/v1/operations/", params={"kind": "inventory", "status": "pending", "page_size": 1}
                )
                if found.status_code == 200 and pending.status_code == 200:
                    total, waiting = found.json()["count"], pending.json()["count"]
                    if total >= self.args.nodes and waiting == 0:
                        print(f"settled in {time.monotonic() - started:.0f} s", file=sys.stderr, flush=True)
                        return
                time.sleep(2)
        raise SystemExit(f"the fleet did not settle within {SETTLE_TIMEOUT_S} s; see {self.dir / 'logs'}")

    def snapshot(self) -> dict:
        """CPU seconds so far: the panel's processes by role, the load, the viewers (this process), and per
        process the machine's RabbitMQ, Redis and PostgreSQL (shared with whatever else runs here); and the
        bench database's counters."""
        cpu = {"panel": cpu_seconds(self.panel), "web": cpu_seconds(self.panel[:1])}
        cpu["workers+beat"] = cpu["panel"] - cpu["web"]
        cpu["load"] = cpu_seconds([self.load])
        cpu["viewers"] = cpu_seconds([psutil.Process()], children=False)
        shared = {}
        for process in psutil.process_iter(["name", "cpu_times"]):
            label, times = SHARED_PROCESSES.get(process.info["name"]), process.info["cpu_times"]
            if label and times:
                shared[(label, process.pid)] = times.user + times.system
        with psycopg.connect(self.db_url, autocommit=True) as connection:
            rows, sessions, commits = connection.execute(
                "SELECT tup_inserted + tup_updated + tup_deleted, sessions, xact_commit "
                "FROM pg_stat_database WHERE datname = %s",
                (self.db_name,),
            ).fetchone()
        return {"cpu": cpu, "shared": shared, "rows": rows, "sessions": sessions, "commits": commits}

    def metric_row_bytes(self) -> float | None:
        """Bytes per metric history row in PostgreSQL (table, TOAST and indexes), None before any."""
        with psycopg.connect(self.db_url, autocommit=True) as connection:
            rows = sum(connection.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in METRIC_TABLES)  # noqa: S608
            size = sum(
                connection.execute("SELECT pg_total_relation_size(%s)", (t,)).fetchone()[0]
                for t in METRIC_TABLES
            )
        # A few minutes of a small fleet sit in mostly empty pages: too few rows to tell a row's size.
        return size / rows if rows >= MIN_ROWS_FOR_SIZE else None

    def sent_in(self, window: Window) -> dict[str, set[int]]:
        """Per node, the sequence numbers of the samples taken inside `window` the load handed the broker."""
        sent: dict[str, set[int]] = {}
        for line in self.sent.read_text().splitlines():
            parts = line.split()
            if len(parts) == 3 and window.holds(float(parts[2])):
                sent.setdefault(parts[0], set()).add(int(parts[1]))
        return sent

    def stop(self) -> None:
        try:
            if getattr(self, "load", None) is not None:
                self.load.terminate()  # first, so its operations end while the panel still listens
                psutil.wait_procs([self.load], timeout=20)
            self.supervisor.stop()
        finally:
            if self.db_name:
                drop_database(self.shared_db_url, self.db_name)
            self.broker.close()
            forget_nodes(self.args.redis_url, self.names)


def forget_nodes(redis_url: str, names: list[str]) -> None:
    """The bench's nodes' live metrics in the shared Redis (everything else there expires on its own)."""
    import redis

    client = redis.Redis.from_url(redis_url)
    kinds = ("latest", "ring", "alerts", "hb", "ds")
    client.delete(*[f"mon:{kind}:{name}" for name in names for kind in kinds])
    client.srem("mon:nodes", *names)


def screens(names: list[str], viewers: int, on_screen: int) -> list[list[str]]:
    """The nodes each viewer's dashboard page shows: consecutive pages, wrapping round the fleet."""
    size = min(on_screen, len(names))
    return [[names[(i * size + j) % len(names)] for j in range(size)] for i in range(viewers)]


async def phase(fleet: Fleet, kind: str, pages: list[list[str]], seconds: float, warmup: float) -> dict:
    """K viewers of `kind` ("push", "polling" or "ingest": none) for a window; returns what each received,
    the window, and the CPU and rows used in it."""
    window, stop = Window(), asyncio.Event()
    received: list[dict] = [{} for _ in pages]
    ready = [asyncio.Event() for _ in pages]
    if kind == "push":
        url = f"ws://127.0.0.1:{fleet.port}/ws/"
        runs = [
            push_client(
                url,
                fleet.viewer_tokens[i],
                ["fleet", *(f"node.{n}" for n in page)],
                window,
                stop,
                ready[i],
                received[i],
            )
            for i, page in enumerate(pages)
        ]
    elif kind == "polling":
        runs = [
            poll_client(fleet.base, fleet.viewer_tokens[i], page, window, stop, ready[i], received[i])
            for i, page in enumerate(pages)
        ]
    else:
        runs, ready = [], []
    before, after = await measure_window(
        kind, runs, ready, window, stop, fleet.snapshot, warmup=warmup, seconds=seconds, ready_within=180
    )
    cpu = {key: after["cpu"][key] - before["cpu"][key] for key in after["cpu"]}
    for label in sorted(set(SHARED_PROCESSES.values())):  # processes that lived through the window
        alive = [key for key in after["shared"] if key[0] == label and key in before["shared"]]
        cpu[label] = sum(after["shared"][key] - before["shared"][key] for key in alive)
    counters = {key: after[key] - before[key] for key in ("rows", "sessions", "commits")}
    print(f"{kind}: database {counters}", file=sys.stderr)
    print(cpu_line(f"{kind} ({seconds:.0f} s)", cpu), file=sys.stderr)
    return {"received": received, "window": window, "cpu": cpu, **counters}


def lost_samples(pages: list[list[str]], push: dict, sent: dict[str, set[int]]) -> int:
    """Samples of each viewer's on-screen nodes that the load sent inside the window and it never got."""
    lost = 0
    for page, got in zip(pages, push["received"], strict=True):
        for name in page:
            lost += len(sent.get(name, set()) - set(got.get(name, {})))
    return lost


def per_sample_ratio(push: dict, polling: dict, part: str) -> float:
    """Polling ÷ push: CPU of the panel's `part` ("web", "panel") per delivered sample."""
    push_n, poll_n = delivered(push["received"]), delivered(polling["received"])
    if not push_n or not poll_n or push["cpu"][part] <= 0:
        return float("nan")
    return (polling["cpu"][part] / poll_n) / (push["cpu"][part] / push_n)


async def measure(args) -> dict:
    fleet = Fleet(args)
    try:
        fleet.start()
        pages = screens(fleet.names, args.viewers, args.on_screen)
        backlog_start = fleet.ingest_backlog()
        ingest = await phase(fleet, "ingest", [], args.seconds, args.warmup)
        push = await phase(fleet, "push", pages, args.seconds, args.warmup)
        ingest_lag = fleet.ingest_lag_ms()  # between the windows: the scrape's CPU is in neither
        polling = await phase(fleet, "polling", pages, args.seconds, args.warmup)
        backlog_end = fleet.ingest_backlog()
        row_bytes = fleet.metric_row_bytes()
        sent = fleet.sent_in(push["window"])
        lost = lost_samples(pages, push, sent)
    finally:
        fleet.stop()
    lat = latencies(push["received"])
    ingest_per_s = ingest["cpu"]["panel"] / args.seconds
    # Delivery is the web processes' work: a frame forwarded to a socket, or a REST answer. The workers'
    # ingest is the same either way; on a shared machine its noise between two windows swamped the
    # difference when taken off the panel's total (at 512 nodes that gave a negative figure), so the
    # headline ratio compares the web processes and "all_in" the panel's total.
    ratio, all_in = per_sample_ratio(push, polling, "web"), per_sample_ratio(push, polling, "panel")
    week_rows = history_rows(args.nodes, 7, fleet.minute_days)
    rows = sum(phase_["rows"] for phase_ in (ingest, push, polling))
    polled = latencies(polling["received"])
    print(
        f"push: {len(lat)} samples delivered, p50 {quantile(lat, 0.5):.0f} ms; polling: {len(polled)} new "
        f"samples seen, p99 {quantile(polled, 0.99):.0f} ms; ingest alone {ingest_per_s:.2f} cores; load "
        f"average {os.getloadavg()[0]:.1f}; agent → panel (each node's last sample after the push window) "
        f"p50 {quantile(ingest_lag, 0.5):.0f} ms, p99 {quantile(ingest_lag, 0.99):.0f} ms",
        file=sys.stderr,
    )
    return {
        "nodes": args.nodes,
        "npus": args.nodes * NPUS_PER_NODE,
        "viewers": args.viewers,
        "p99_ms": round(quantile(lat, 0.99), 1),
        "lost": lost,
        # Samples a second per node the load managed to send in the push window (1.0 unless it starved).
        "sample_hz": round(sum(map(len, sent.values())) / args.nodes / args.seconds, 2),
        "panel_cpu_cores": round(push["cpu"]["panel"] / args.seconds, 3),
        "db_rows_per_s": round(rows / (3 * args.seconds), 1),
        "push_vs_poll": round(ratio, 2),
        "push_vs_poll_all_in": round(all_in, 2),
        "ingest_cpu_cores": round(ingest_per_s, 3),
        # Messages in the ingest queue before the first window and after the last: growing means the panel
        # takes in less than the fleet sends.
        "ingest_backlog": [backlog_start, backlog_end],
        "ingest_lag_ms": [round(quantile(ingest_lag, q), 1) for q in (0.5, 0.99)],
        "week_rows": week_rows,
        "retained_rows": history_rows(args.nodes, fleet.retention_days, fleet.minute_days),
        "week_gb": round(week_rows * row_bytes / 1e9, 1) if row_bytes else None,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=int, default=32)
    parser.add_argument("--viewers", type=int, default=32)
    parser.add_argument("--seconds", type=float, default=20, help="measured seconds per window")
    parser.add_argument(
        "--sweep", action="store_true", help=f"one run per size: {' → '.join(map(str, SWEEP))}"
    )
    parser.add_argument("--on-screen", type=int, default=8, help="nodes on each viewer's dashboard page")
    parser.add_argument(
        "--operations", type=int, default=0, help="nodes streaming an operation (default N/16)"
    )
    parser.add_argument(
        "--log-lines", type=float, default=2.0, help="log lines a second per streaming operation"
    )
    parser.add_argument("--heartbeat-s", type=float, default=5.0, help="the agents' heartbeat interval")
    parser.add_argument("--warmup", type=float, default=5)
    parser.add_argument("--web-workers", type=int, default=2)
    parser.add_argument("--panel-workers", type=int, default=2)
    parser.add_argument("--worker-threads", type=int, default=8)
    parser.add_argument("--redis-url", default=os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0"))
    parser.add_argument("--agents", action="store_true", help=argparse.SUPPRESS)  # the load's process
    fleet_agents.add_arguments(parser)
    args = parser.parse_args()
    if args.agents:
        fleet_agents.play(args)
        return
    for nodes in SWEEP if args.sweep else (args.nodes,):
        args.nodes = nodes
        args.operations = args.operations if args.operations and not args.sweep else max(1, nodes // 16)
        print(json.dumps(asyncio.run(measure(args))), flush=True)


if __name__ == "__main__":
    main()
