"""/metrics: the fleet's NPUs under the names Huawei's npu-exporter uses (so existing Grafana boards work),
plus the panel's own figures. Read from the Redis latest values on each scrape, never from samples."""

import time
from collections.abc import Callable, Iterable

from django.db.models import Count
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import CollectorRegistry

from panel.accounts.signin_limits import failure_figures
from panel.core.domain.choices import NodeStatus, NodeTransport
from panel.core.infra.refusals import rejected_by_reason, state_counts
from panel.monitoring.metrics import store
from panel.nodes.models import Node
from panel.operations.models import Operation

NPU_LABELS = ["id", "chip_id", "model_name", "node", "logic_id"]
# (npu-exporter name, help, field of the "metrics" message). HBM and memory are in MB, like npu-exporter.
NPU_GAUGES = (
    ("npu_chip_info_utilization", "the ai core utilization", "aicore_pct"),
    ("npu_chip_info_hbm_used_memory", "the npu hbm used memory (MB)", "hbm_used_mb"),
    ("npu_chip_info_hbm_total_memory", "the npu hbm total memory (MB)", "hbm_total_mb"),
    ("npu_chip_info_used_memory", "the npu used memory (MB)", "memory_used_mb"),
    ("npu_chip_info_total_memory", "the npu total memory (MB)", "memory_total_mb"),
    ("npu_chip_info_power", "the npu power (W)", "power_w"),
    ("npu_chip_info_temperature", "the npu temperature (Celsius)", "temp_c"),
)

# Metric families of apps above monitoring (the gateway's request figures): each app adds its collect
# function in its AppConfig.ready(), so monitoring does not import them.
EXTRA_COLLECTORS: list[Callable[[], Iterable]] = []


def _label(value) -> str:
    return "" if value is None else str(value)


class FleetCollector:
    """A prometheus_client collector over the latest message of every node."""

    def collect(self):
        latest = store.read_latest(store.known_nodes())
        gauges = {name: GaugeMetricFamily(name, text, labels=NPU_LABELS) for name, text, _ in NPU_GAUGES}
        health = GaugeMetricFamily(
            "npu_chip_info_health_status", "the npu health status: 1 healthy, 0 not", labels=NPU_LABELS
        )
        counts = GaugeMetricFamily(
            "machine_npu_nums", "Amount of npu installed on the machine.", labels=["node"]
        )
        lag = GaugeMetricFamily(
            "ascend_panel_ingest_lag_seconds",
            "seconds between a node's last sample and its arrival at the panel",
            labels=["node"],
        )
        for node, message in sorted(latest.items()):
            npus = message.get("npus") or []
            counts.add_metric([node], len(npus))
            lag.add_metric([node], max(0.0, message["received"] - _epoch(message["time"])))
            for npu in npus:
                labels = [
                    str(npu["npu_id"]),
                    str(npu["chip_id"]),
                    _label(npu.get("name")),
                    node,
                    _label(npu.get("logic_id")),
                ]
                for name, _text, field in NPU_GAUGES:
                    if npu.get(field) is not None:
                        gauges[name].add_metric(labels, npu[field])
                if npu.get("health"):
                    health.add_metric(labels, 1 if npu["health"] == "OK" else 0)
        yield from gauges.values()
        yield health
        yield counts
        yield lag
        yield from panel_gauges()


def panel_gauges():
    online = sum(
        1
        for node in Node.objects.filter(transport=NodeTransport.AGENT)
        if node.effective_status == NodeStatus.ONLINE
    )
    agents = GaugeMetricFamily("ascend_panel_agents_online", "agents that sent a heartbeat recently")
    agents.add_metric([], online)
    yield agents
    operations = GaugeMetricFamily("ascend_panel_operations", "operations by state", labels=["state"])
    for row in Operation.objects.values("status").annotate(n=Count("id")).order_by("status"):
        operations.add_metric([row["status"]], row["n"])
    yield operations
    # Messages refused for their signature, their sender, their age or as replays (panel.core.infra.refusals).
    rejected = CounterMetricFamily(
        "panel_rejected_messages",
        "messages the panel refused, by kind and reason",
        labels=["kind", "reason"],
    )
    for (kind, reason), count in sorted(rejected_by_reason().items()):
        rejected.add_metric([kind, reason], count)
    yield rejected
    # Panel state read back from Redis that the panel did not write (panel.core.infra.refusals).
    refused_state = CounterMetricFamily(
        "panel_rejected_state",
        "cache values, gateway entries and usage items read from Redis and refused, by kind",
        labels=["kind"],
    )
    for kind, count in sorted(state_counts(store.client()).items()):
        refused_state.add_metric([kind], count)
    yield refused_state
    figures = failure_figures()
    failures = CounterMetricFamily("panel_signin_failures", "failed sign-ins across the panel")
    failures.add_metric([], figures["total"])
    yield failures
    alarm = GaugeMetricFamily(
        "panel_signin_failure_alarm",
        "1 while failed sign-ins per minute are past PANEL_SIGNIN_ALARM_FAILURES_PER_MINUTE",
    )
    alarm.add_metric([], int(figures["alarm"]))
    yield alarm
    for collect in EXTRA_COLLECTORS:
        yield from collect()


def _epoch(iso: str) -> float:
    from django.utils.dateparse import parse_datetime

    parsed = parse_datetime(iso)
    return parsed.timestamp() if parsed else time.time()


def registry() -> CollectorRegistry:
    fresh = CollectorRegistry(auto_describe=False)
    fresh.register(FleetCollector())
    return fresh
