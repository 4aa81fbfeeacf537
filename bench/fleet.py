"""Scale on the real path: N agent nodes × 8 NPUs and K dashboards on the panel as production runs it.

    .venv/bin/python bench/fleet.py [--nodes 32] [--viewers 32] [--windows 3] [--window-s 120] [--sweep]

Starts, on scratch state of its own: a PostgreSQL database on DATABASE_URL's server (bench_fleet_<hex>,
dropped afterwards), a vhost and panel user on the machine's RabbitMQ (the fleet broker; management API at
TEST_RABBITMQ_ADMIN_URL, deleted afterwards with every node user), the panel's Redis at REDIS_URL (give the
bench a database of its own), `python -m panel.web --workers W` with its access log, P panel workers and
beat, all at LOG_LEVEL=INFO (logs under the scratch directory the bench names). Then one load process
(bench/fleet_agents.py) joins N nodes through POST /nodes/agent/join/, each with its own join token, and
plays them through their own broker users and keys: heartbeats, 1 Hz metric batches, the inventory every
new node gets, and operations streaming log lines.

Once every node has answered its inventory and the ingest queue drained what the start-up burst left there
(at most DRAIN_TIMEOUT_S), --windows windows, each of three phases of --window-s:
  ingest:  no viewers; what the panel pays for the fleet alone;
  push:    K viewers hold a dashboard's websocket: the fleet summary plus one page of nodes each, as
           static/js/dashboard.js subscribes; a page is the dashboard's (panel.core.views.NODES_PER_PAGE,
           read from the panel at set-up), viewer i sees nodes i·S … i·S+S-1, wrapping round the fleet;
  polling: the same K viewers ask GET /api/v1/metrics/latest/?node=… for their page once a second (the same
           freshness).
bench/fleet_figures.py says what each window's figures mean and how the windows are combined. The JSON adds
`on_screen` (what the viewers watch), `broker` (the RabbitMQ settings the run used), `targets` (each judged
on the worst window) and, per run: week_rows, metric history rows a week of N nodes keeps (one row per NPU
and one per host per minute for PANEL_METRICS_MINUTE_DAYS, one an hour before that:
panel.monitoring.metrics.rollup), retained_rows, what PANEL_METRICS_RETENTION_DAYS keeps; week_gb from the
bytes per row the downsampler's rows take in PostgreSQL here (null under 20,000 rows: too few to tell);
ingest_backlog, heartbeats and event batches in the broker before the first window and after the last.
The load's and viewers' CPU go to stderr. Last line: JSON. A publish error of the load or a panel process
(or the load) that exits during a window fails the run (exit status 1) whatever the figures.
"""

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from urllib.parse import quote, urlsplit

import httpx
import psutil
import psycopg

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench import fleet_agents, fleet_figures  # noqa: E402
from bench.live_viewers import (  # noqa: E402
    Server,
    Window,
    cpu_line,
    cpu_seconds,
    latencies,
    measure_window,
    poll_client,
    push_client,
    quantile,
    spent,
)
from panel import web  # noqa: E402
from panel.run import PYTHON, Supervisor, beat_argv, free_port, panel_worker_argv, wait_for_port  # noqa: E402
from tests.browser.fake_fleet import NPUS_PER_NODE  # noqa: E402
from tests.faults.stack import drop_database, own_database  # noqa: E402
from tests.rabbitmq import AMQP_ADDRESS, scratch_broker  # noqa: E402
from workers.topology import INGEST_QUEUE  # noqa: E402

SWEEP = (32, 128, 512)
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
from panel.core.views import NODES_PER_PAGE
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
    "page_size": NODES_PER_PAGE,  # the dashboard's page: what one viewer has on screen
}))
"""


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
            LOG_LEVEL="INFO",  # as production logs: what the panel writes is part of its cost
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
        self.viewer_tokens, self.page_size = setup["viewer_tokens"], setup["page_size"]
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        argv = [*web.argv("127.0.0.1", self.port, PYTHON), "--workers", str(args.web_workers)]
        self.panel.append(psutil.Process(self.supervisor.start("web", argv).pid))
        for index in range(args.panel_workers):
            argv = at_info(panel_worker_argv("threads", args.worker_threads, name=f"panel{index}"))
            self.panel.append(psutil.Process(self.supervisor.start(f"panel-worker-{index}", argv).pid))
        beat = at_info(beat_argv(self.dir / "celerybeat-schedule"))
        self.panel.append(psutil.Process(self.supervisor.start("beat", beat).pid))
        wait_for_port(self.port, timeout=120)
        spec = self.dir / "spec.json"
        spec.write_text(json.dumps({"panel": self.base, "tokens": setup["join_tokens"]}))
        spec.chmod(0o600)  # join tokens
        self.sent, self.status = self.dir / "sent.txt", self.dir / "load-status.json"
        load = [
            *(PYTHON, __file__, "--agents", "--spec", str(spec), "--sent", str(self.sent)),
            *("--status", str(self.status)),
            *("--operations", str(args.operations), "--log-lines", str(args.log_lines)),
            *("--heartbeat-s", str(args.heartbeat_s)),
        ]
        self.load = psutil.Process(
            self.supervisor.start("load", load, env=AGENT_ENV | self.agent_broker()).pid
        )
        self.servers = [
            Server("postgres", urlsplit(self.db_url).port or 5432, "postgres", database=self.db_name),
            Server("rabbitmq", int(AMQP_ADDRESS.rsplit(":", 1)[1]), "beam.smp"),
            Server("redis", urlsplit(args.redis_url).port or 6379, "redis-server"),
        ]
        missing = [server.label for server in self.servers if server.root is None]
        if missing:
            print(f"not measured (no listener here): {missing}", file=sys.stderr, flush=True)
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
        """CPU seconds so far: the panel's processes by role, the load, the viewers (this process), the
        servers the panel stands on (per process); and the bench database's counters."""
        cpu = {"panel": cpu_seconds(self.panel), "web": cpu_seconds(self.panel[:1])}
        cpu["workers+beat"] = cpu["panel"] - cpu["web"]
        cpu["load"] = cpu_seconds([self.load])
        cpu["viewers"] = cpu_seconds([psutil.Process()], children=False)
        servers = {key: seconds for server in self.servers for key, seconds in server.seconds().items()}
        with psycopg.connect(self.db_url, autocommit=True) as connection:
            counters = connection.execute(
                "SELECT tup_inserted + tup_updated + tup_deleted, sessions, xact_commit "
                "FROM pg_stat_database WHERE datname = %s",
                (self.db_name,),
            ).fetchone()
        assert counters is not None, "the bench's database is gone"
        rows, sessions, commits = counters
        return {"cpu": cpu, "servers": servers, "rows": rows, "sessions": sessions, "commits": commits}

    def mark(self) -> dict:
        """What a window's faults are told from: the living processes of the panel and the load, with their
        children (uvicorn's, Celery's: pid → "role pid"), and the load's failed publishes so far."""
        family: dict[int, str] = {}
        for role, child in self.supervisor.children:
            try:
                root = psutil.Process(child.pid)
                members = [root, *root.children(recursive=True)] if child.poll() is None else []
            except psutil.NoSuchProcess:
                continue
            family |= {member.pid: f"{role} {member.pid}" for member in members}
        status = json.loads(self.status.read_text()) if self.status.exists() else {"errors": {}}
        return {"family": family, "errors": status["errors"]}

    def faults(self, before: dict) -> dict:
        """Since `before` (a mark): publish errors of the load by kind, and the processes that exited."""
        after = self.mark()
        errors = {what: n - before["errors"].get(what, 0) for what, n in after["errors"].items()}
        deaths = [role for pid, role in before["family"].items() if pid not in after["family"]]
        return {"publish_errors": errors, "deaths": deaths}

    def metric_row_bytes(self) -> float | None:
        """Bytes per metric history row in PostgreSQL (table, TOAST and indexes), None before any."""
        with psycopg.connect(self.db_url, autocommit=True) as connection:
            rows = sum(one(connection, f"SELECT count(*) FROM {t}") for t in METRIC_TABLES)  # noqa: S608
            size = sum(one(connection, "SELECT pg_total_relation_size(%s)", (t,)) for t in METRIC_TABLES)
        # A few minutes of a small fleet sit in mostly empty pages: too few rows to tell a row's size.
        return size / rows if rows >= MIN_ROWS_FOR_SIZE else None

    def sent_samples(self) -> list[tuple[str, int, float]]:
        """Every metrics batch the broker took from the load so far: (node, seq, sample time)."""
        found = []
        for line in self.sent.read_text().splitlines():
            parts = line.split()
            if len(parts) == 3:
                found.append((parts[0], int(parts[1]), float(parts[2])))
        return found

    def stored(self, window: Window) -> dict[str, set[int]]:
        """Per node, the sample times (ms) of `window` the panel's live store holds (the ring a dashboard
        back-fills from, one hour deep): every node, on a screen or not. 1 ms of slack either side: the
        load writes times rounded to the millisecond."""
        import orjson
        import redis

        client = redis.Redis.from_url(self.args.redis_url)
        pipe = client.pipeline(transaction=False)
        for name in self.names:
            pipe.zrangebyscore(f"mon:ring:{name}", window.start - 0.001, window.end + 0.001)
        return {
            name: {round(orjson.loads(member)["t"] * 1000) for member in members}
            for name, members in zip(self.names, pipe.execute(), strict=True)
        }

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


def one(connection: psycopg.Connection, query: str, params: tuple = ()) -> int:
    """The single figure a query answers."""
    row = connection.execute(query, params).fetchone()
    assert row is not None, query
    return row[0]


def at_info(argv: list[str]) -> list[str]:
    """A Celery command line (panel.run's, at WARNING) logging at INFO, as a production worker does."""
    index = argv.index("--loglevel") + 1
    return [*argv[:index], "INFO", *argv[index + 1 :]]


async def phase(fleet: Fleet, kind: str, pages: list[list[str]], seconds: float, warmup: float) -> dict:
    """K viewers of `kind` ("push", "polling" or "ingest": none) for a window; returns what each received,
    the window, and the CPU and rows used in it."""
    window, stop = Window(), asyncio.Event()
    received: list[dict] = [{} for _ in pages]
    ready = [asyncio.Event() for _ in pages]
    parts: list[tuple[float, float]] = []
    if kind == "push":
        url = f"ws://127.0.0.1:{fleet.port}/ws/"
        runs = [
            push_client(url, fleet.viewer_tokens[i], groups, window, stop, ready[i], received[i], parts)
            for i, groups in enumerate(["fleet", *(f"node.{n}" for n in page)] for page in pages)
        ]
    elif kind == "polling":
        runs = [
            poll_client(fleet.base, fleet.viewer_tokens[i], page, window, stop, ready[i], received[i])
            for i, page in enumerate(pages)
        ]
    else:
        runs, ready = [], []
    lags: list[float] = []
    before, after = await measure_window(
        kind,
        runs,
        ready,
        window,
        stop,
        fleet.snapshot,
        warmup=warmup,
        seconds=seconds,
        ready_within=180,
        lags=lags,
    )
    cpu = {key: after["cpu"][key] - before["cpu"][key] for key in after["cpu"]}
    infra = spent(before["servers"], after["servers"])
    cpu |= infra
    cpu["all_in"] = cpu["panel"] + sum(infra.values())
    counters = {key: after[key] - before[key] for key in ("rows", "sessions", "commits")}
    print(f"{kind}: database {counters}", file=sys.stderr)
    print(cpu_line(f"{kind} ({seconds:.0f} s)", cpu), file=sys.stderr)
    lag = [round(quantile(lags, q), 1) for q in (0.5, 0.99)]
    print(f"{kind}: the viewers' loop woke late by p50 {lag[0]} ms, p99 {lag[1]} ms", file=sys.stderr)
    split = {
        name: [round(quantile([part[i] for part in parts], q), 1) for q in (0.5, 0.99)]
        for i, name in enumerate(("agent_to_panel_ms", "panel_to_viewer_ms"))
    }
    return {"received": received, "window": window, "cpu": cpu, "loop_lag_ms": lag, **split, **counters}


async def one_window(fleet: Fleet, pages: list[list[str]], args) -> tuple[dict, dict]:
    """The three phases of one window, and what was read around them that is not in the phases."""
    mark = fleet.mark()
    seconds = args.window_s
    phases = {"ingest": await phase(fleet, "ingest", [], seconds, args.warmup)}
    phases["push"] = await phase(fleet, "push", pages, seconds, args.warmup)
    ingest_lag = fleet.ingest_lag_ms()  # between the phases: the scrape's CPU is in neither
    phases["polling"] = await phase(fleet, "polling", pages, seconds, args.warmup)
    polled = latencies(phases["polling"]["received"])
    print(
        f"polling: {len(polled)} new samples seen, p99 {quantile(polled, 0.99):.0f} ms; agent → panel p50 "
        f"{quantile(ingest_lag, 0.5):.0f} ms, p99 {quantile(ingest_lag, 0.99):.0f} ms",
        file=sys.stderr,
    )
    measured = {
        "nodes": args.nodes,
        "ingest_lag_ms": [round(quantile(ingest_lag, q), 1) for q in (0.5, 0.99)],
        "faults": fleet.faults(mark),
        "load_average": round(os.getloadavg()[0], 1),
    }
    return phases, measured


async def measure(args) -> dict:
    fleet = Fleet(args)
    runs: list[tuple[dict, dict]] = []
    try:
        fleet.start()
        on_screen = args.on_screen or fleet.page_size
        pages = fleet_figures.screens(fleet.names, args.viewers, on_screen)
        broker = fleet_figures.broker_settings(fleet.broker)
        backlog_start = fleet.ingest_backlog()
        for index in range(args.windows):
            runs.append(await one_window(fleet, pages, args))
            print(f"window {index + 1}/{args.windows}: {runs[-1][1]['faults']}", file=sys.stderr, flush=True)
            if runs[-1][1]["faults"]["deaths"]:
                break  # the panel is not whole: later windows would measure something else
        backlog_end = fleet.ingest_backlog()
        row_bytes = fleet.metric_row_bytes()
        samples = fleet.sent_samples()
        for phases, measured in runs:
            measured["sent"] = fleet_figures.sent_in(samples, phases["push"]["window"])
            measured["stored"] = fleet.stored(phases["push"]["window"])
    finally:
        fleet.stop()
    windows = [fleet_figures.window_figures(args.window_s, p, pages, m) for p, m in runs]
    for index, (phases, measured) in enumerate(runs, 1):
        push = phases["push"]
        for line in fleet_figures.lost_examples(pages, push["received"], measured["sent"], push["window"]):
            print(f"window {index}: lost {line}", file=sys.stderr)
    week_rows = fleet_figures.history_rows(args.nodes, 7, fleet.minute_days)
    watched = Counter(name for page in pages for name in page)
    return {
        "nodes": args.nodes,
        "npus": args.nodes * NPUS_PER_NODE,
        "viewers": args.viewers,
        "windows": len(windows),
        "window_s": args.window_s,
        "on_screen": {
            "per_viewer": min(on_screen, args.nodes),
            "page_size": fleet.page_size,
            "nodes_watched": len(watched),
            "viewers_per_node": [min(watched.values()), max(watched.values())],
        },
        **fleet_figures.across(windows),
        "targets": fleet_figures.targets(windows),
        "failures": fleet_figures.failures(windows),
        # Messages in the ingest queue before the first window and after the last: growing means the panel
        # takes in less than the fleet sends.
        "ingest_backlog": [backlog_start, backlog_end],
        "broker": broker,
        "week_rows": week_rows,
        "retained_rows": fleet_figures.history_rows(args.nodes, fleet.retention_days, fleet.minute_days),
        "week_gb": round(week_rows * row_bytes / 1e9, 1) if row_bytes else None,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=int, default=32)
    parser.add_argument("--viewers", type=int, default=32)
    parser.add_argument(
        "--windows", type=int, default=3, help="measured windows (each: ingest, push, polling)"
    )
    parser.add_argument("--window-s", type=float, default=120, help="seconds of each phase of a window")
    parser.add_argument(
        "--sweep", action="store_true", help=f"one run per size: {' → '.join(map(str, SWEEP))}"
    )
    parser.add_argument(
        "--on-screen", type=int, default=0, help="nodes on each viewer's page (default: the dashboard's page)"
    )
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
    failed = False
    for nodes in SWEEP if args.sweep else (args.nodes,):
        args.nodes = nodes
        args.operations = args.operations if args.operations and not args.sweep else max(1, nodes // 16)
        figures = asyncio.run(measure(args))
        print(json.dumps(figures), flush=True)
        failed = failed or bool(figures["failures"])
    if failed:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
