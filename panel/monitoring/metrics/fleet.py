"""The fleet summary: the dashboard's top figures and the websocket "fleet.summary" message.

Its size and cost do not grow with the fleet's rows in Python: node counts by state, NPU counts per chip
type and open alerts are GROUP BY / COUNT queries (a few dozen rows back whatever the fleet's size), and
the live figures (utilisation, memory used, power) are a per-node line the metrics ingest keeps in one
Redis hash (`store.FIGURES`), summed here. A viewer sees these totals plus the nodes on its own page
(node.<name> groups), never every NPU of the fleet.

Every signed-in role may see every node today (panel.core.models.VisibleQuerySet) and may join the fleet
group (panel.realtime.groups), so the summary is fleet-wide; narrowing who sees which nodes would narrow
this message too.
"""

import time

import orjson
from django.db.models import BooleanField, Case, Count, Exists, OuterRef, Q, Sum, Value, When
from django.db.models.functions import Coalesce, NullIf
from django.utils import timezone

from panel.core.domain.choices import NodeStatus, NpuHealth
from panel.monitoring.alerting import alerts
from panel.monitoring.metrics import store
from panel.monitoring.models import Alert, AlertKind, AlertSeverity
from panel.nodes.models import Node, Npu, live_status_expression

UNHEALTHY = (NpuHealth.WARNING, NpuHealth.ALARM, NpuHealth.CRITICAL)
FIGURES_FRESH_S = 15  # a node whose last batch is older than this is left out of the live figures
NO_CHIP_NAME = ""  # NPUs the inventory has not named yet are counted under this chip type
NPU_FIELDS = ("total", "free", "busy", "unhealthy", "offline", "memory_total_mb")
LIVE_SUMS = (
    "npus",
    "util_sum",
    "util_n",
    "memory_used_mb",
    "memory_used_n",
    "memory_total_mb",
    "power_w",
    "power_n",
)


def node_counts(now=None) -> dict:
    """Nodes by effective status (offline as soon as heartbeats stop, sweeper or not), and cordoned ones."""
    rows = (
        Node.objects.order_by()
        .with_live_status(now)
        .values("live_status", "cordoned")
        .annotate(count=Count("pk"))
    )
    counts = {"total": 0, **dict.fromkeys(NodeStatus.values, 0), "cordoned": 0}
    for row in rows:
        counts["total"] += row["count"]
        counts[str(row["live_status"])] += row["count"]
        if row["cordoned"]:
            counts["cordoned"] += row["count"]
    return counts


def npu_is_held():
    """An NPU some deployment holds (panel.deployments places and releases them; read here by relation)."""
    return Exists(Npu.deployments.through.objects.filter(npu_id=OuterRef("pk")))


def npu_is_unhealthy():
    """The last inventory said Warning / Alarm / Critical, or live samples raised an NPU health alert that
    is still open (the inventory's health is only as fresh as the last inventory)."""
    health_alert = Alert.objects.filter(
        resolved_at__isnull=True,
        kind=AlertKind.NPU_HEALTH,
        node_id=OuterRef("node_id"),
        npu_id=OuterRef("npu_id"),
        chip_id=OuterRef("chip_id"),
    )
    return Case(
        When(Q(health__in=UNHEALTHY) | Q(Exists(health_alert)), then=Value(True)),
        default=Value(False),
        output_field=BooleanField(),
    )


def chip_counts(now=None) -> list[dict]:
    """Per chip type (the NPU's name, e.g. 910B3): total, busy (held by a deployment), unhealthy, offline
    (its node is not online), free (none of those and its node is not cordoned), and device memory (HBM,
    or DDR on 310P) from the last inventory. Busy and unhealthy may overlap; free excludes every other."""
    rows = (
        Npu.objects.order_by()
        .annotate(
            held=npu_is_held(),
            unhealthy=npu_is_unhealthy(),
            node_status=live_status_expression(now, prefix="node__"),
        )
        .values("name", "held", "unhealthy", "node_status", "node__cordoned")
        .annotate(
            count=Count("pk"),
            memory_mb=Sum(Coalesce(NullIf("hbm_total_mb", 0), "memory_total_mb")),
        )
    )
    chips: dict[str, dict] = {}
    for row in rows:
        name = row["name"] or NO_CHIP_NAME
        chip = chips.setdefault(name, {"chip": name, **dict.fromkeys(NPU_FIELDS, 0)})
        count = row["count"]
        online = row["node_status"] == NodeStatus.ONLINE
        chip["total"] += count
        chip["busy"] += count if row["held"] else 0
        chip["unhealthy"] += count if row["unhealthy"] else 0
        chip["offline"] += 0 if online else count
        if online and not (row["held"] or row["unhealthy"] or row["node__cordoned"]):
            chip["free"] += count
        chip["memory_total_mb"] += row["memory_mb"] or 0
    return [chips[name] for name in sorted(chips)]


def alert_counts() -> dict:
    return Alert.objects.open().aggregate(
        open=Count("pk"),
        unacknowledged=Count("pk", filter=Q(acknowledged_at__isnull=True)),
        critical=Count("pk", filter=Q(severity=AlertSeverity.CRITICAL)),
    )


def node_figures(message: dict, received: float) -> bytes:
    """The line the ingest keeps per node for the live figures: sums over the node's chips in its newest
    sample, so the summary adds one short line per node rather than reading every chip."""
    npus = message.get("npus") or []
    utils = [n["aicore_pct"] for n in npus if n.get("aicore_pct") is not None]
    memory = [alerts.device_memory(n) for n in npus]
    powers = [n["power_w"] for n in npus if n.get("power_w") is not None]
    return orjson.dumps(
        {
            "t": round(received, 3),
            "npus": len(npus),
            "util_sum": sum(utils),
            "util_n": len(utils),
            "memory_used_mb": sum(used or 0 for used, _ in memory),
            "memory_used_n": sum(1 for used, _ in memory if used is not None),
            "memory_total_mb": sum(total or 0 for _, total in memory),
            "power_w": sum(powers),
            "power_n": len(powers),
        }
    )


def live_figures(now: float | None = None) -> dict:
    """Fleet totals of the newest sample of every node heard from in the last FIGURES_FRESH_S; lines of
    nodes silent for longer than the latest value lives (store.LATEST_TTL_S) are dropped from the hash."""
    now = time.time() if now is None else now
    redis = store.client()
    totals = dict.fromkeys(("nodes", *LIVE_SUMS), 0)
    gone = []
    for name, raw in redis.hgetall(store.FIGURES).items():
        line = orjson.loads(raw)
        if line["t"] < now - store.LATEST_TTL_S:
            gone.append(name)
        if line["t"] < now - FIGURES_FRESH_S:
            continue
        totals["nodes"] += 1
        for key in LIVE_SUMS:
            totals[key] += line.get(key) or 0
    if gone:
        redis.hdel(store.FIGURES, *gone)
    return {
        "nodes": totals["nodes"],
        "npus": totals["npus"],
        "util_mean": round(totals["util_sum"] / totals["util_n"], 1) if totals["util_n"] else None,
        "memory_used_mb": round(totals["memory_used_mb"], 1) if totals["memory_used_n"] else None,
        "memory_total_mb": totals["memory_total_mb"] if totals["npus"] else None,
        "power_w": round(totals["power_w"], 1) if totals["power_n"] else None,
    }


def npu_totals(chips: list[dict]) -> dict:
    return {key: sum(chip[key] for chip in chips) for key in NPU_FIELDS}


def fleet_summary(*, live: bool = True) -> dict:
    """The "fleet.summary" message: five small queries and one Redis read, whatever the fleet's size
    (`live=False`: no Redis read, the live figures are None)."""
    now = timezone.now()
    chips = chip_counts(now)
    return {
        "type": "fleet.summary",
        "time": now.isoformat(),
        "nodes": node_counts(now),
        "npus": npu_totals(chips),
        "chips": chips,
        "alerts": alert_counts(),
        "live": live_figures() if live else None,
    }
