"""Metric history: the minute downsampler (ring buffer → tables) and the columnar series the history API
returns ({"time": [...], "series": {"npu.0.0.util": [...], ...}}, the shape uPlot draws)."""

import math
import re
from collections import defaultdict
from datetime import UTC, datetime, timedelta

from django.conf import settings
from django.utils.dateparse import parse_datetime

from panel.monitoring.metrics import store
from panel.monitoring.metrics.downsample import HOST_FIELDS, NPU_FIELDS, minute_of, minute_stats
from panel.monitoring.models import HostMetricMinute, NpuMetricMinute
from panel.nodes.models import Node

RELATIVE = re.compile(r"^(\d+)([smhd])$")
UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
MAX_POINTS = 1000
HOST_COLUMNS = {"cpu": "cpu", "memory_used": "memory_used", "load1": "load1"}
NPU_COLUMNS = {
    "util": "util",
    "hbm_used": "hbm_used",
    "power": "power",
    "temp": "temp",
    "memory_used": "memory_used",
}


class HistoryError(ValueError):
    def __init__(self, field: str, message: str):
        super().__init__(message)
        self.field = field


def parse_since(value: str | None, now: datetime) -> datetime:
    """ "5m", "1h", "24h", "7d" (before now) or an ISO 8601 time; default the last hour."""
    if not value:
        return now - timedelta(hours=1)
    match = RELATIVE.match(value.strip())
    if match:
        return now - timedelta(seconds=int(match[1]) * UNIT_SECONDS[match[2]])
    parsed = parse_datetime(value.strip().replace(" ", "+"))
    if parsed is None:
        raise HistoryError(
            "since", f"{value!r} is neither a relative time like 5m, 1h, 7d nor an ISO 8601 time"
        )
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def parse_step(value: str | None, span_s: float) -> int:
    if not value:
        return max(1, math.ceil(span_s / MAX_POINTS))
    try:
        step = int(value)
    except ValueError:
        raise HistoryError("step", f"step must be a whole number of seconds, got {value!r}") from None
    if step < 1:
        raise HistoryError("step", "step must be at least 1 second")
    if span_s / step > 20 * MAX_POINTS:
        raise HistoryError("step", f"that is more than {20 * MAX_POINTS} points; use a larger step")
    return step


def node_history(node: Node, since: str | None, step: str | None, now: datetime | None = None) -> dict:
    """Columns for one node since `since`, one point per `step` seconds. The last hour at steps under a
    minute comes from the ring buffer at full resolution; anything else from the minute table."""
    now = now or datetime.now(UTC)
    start = parse_since(since, now)
    span = max(1.0, (now - start).total_seconds())
    step_s = parse_step(step, span)
    from_ring = step_s < 60 and start >= now - timedelta(seconds=settings.PANEL_METRICS_RING_SECONDS)
    if from_ring:
        points = ring_points(node.name, start.timestamp())
        source = "ring"
    else:
        step_s = max(60, step_s - step_s % 60)
        points = minute_points(node, start)
        source = "minutes"
    result = columns(points, step_s, aggregate=source == "minutes" or step_s > 1)
    return {"node": node.name, "since": start.isoformat(), "step": step_s, "source": source, **result}


def ring_points(node_name: str, since_epoch: float) -> list[tuple[float, dict[str, tuple]]]:
    """[(epoch, {series name: (mean, max)})] of raw samples; mean == max for a single sample."""
    points = []
    for sample in store.read_ring(node_name, since_epoch):
        values = {f"host.{name}": (sample["h"][at],) * 2 for name, at in HOST_FIELDS.items()}
        for row in sample["n"]:
            for name, at in NPU_FIELDS.items():
                values[f"npu.{row[0]}.{row[1]}.{name}"] = (row[at],) * 2
        points.append((sample["t"], values))
    return points


def minute_points(node: Node, start: datetime) -> list[tuple[float, dict[str, tuple]]]:
    by_minute: dict[float, dict[str, tuple]] = defaultdict(dict)
    for row in HostMetricMinute.objects.filter(node=node, minute__gte=start).values():
        values = by_minute[row["minute"].timestamp()]
        for name, column in HOST_COLUMNS.items():
            values[f"host.{name}"] = (row[f"{column}_mean"], row[f"{column}_max"])
    for row in NpuMetricMinute.objects.filter(node=node, minute__gte=start).values():
        values = by_minute[row["minute"].timestamp()]
        for name, column in NPU_COLUMNS.items():
            values[f"npu.{row['npu_id']}.{row['chip_id']}.{name}"] = (
                row[f"{column}_mean"],
                row[f"{column}_max"],
            )
    return sorted(by_minute.items())


def columns(points: list[tuple[float, dict[str, tuple]]], step: int, aggregate: bool) -> dict:
    """Bucket points by `step`; each series gets the mean of its means and, when a bucket can hold more
    than one sample, a `<name>.max` companion. Missing figures are null, so every column is as long as
    "time"."""
    buckets: dict[int, dict[str, list]] = defaultdict(lambda: defaultdict(list))
    names: set[str] = set()
    for epoch, values in points:
        bucket = buckets[int(epoch // step) * step]
        for name, pair in values.items():
            bucket[name].append(pair)
            names.add(name)
    times = sorted(buckets)
    series: dict[str, list] = {}
    for name in sorted(names, key=_series_order):
        means, maxes = [], []
        for at in times:
            pairs = [p for p in buckets[at].get(name, []) if p[0] is not None]
            means.append(round(sum(p[0] for p in pairs) / len(pairs), 3) if pairs else None)
            maxes.append(max((p[1] for p in pairs if p[1] is not None), default=None))
        series[name] = means
        if aggregate:
            series[f"{name}.max"] = maxes
    return {"time": times, "series": series}


def _series_order(name: str):
    parts = name.split(".")
    return [int(p) if p.isdigit() else p for p in parts]


def downsample_node(node_id: int, node_name: str, now_epoch: float) -> int:
    """Minute rows for every complete minute after the last one written; returns rows written."""
    redis = store.client()
    done = redis.get(store.downsampled_key(node_name))
    current_minute = minute_of(now_epoch)
    start = float(done) + 60 if done else now_epoch - settings.PANEL_METRICS_RING_SECONDS
    if start >= current_minute:
        return 0
    stats = minute_stats(store.read_ring(node_name, start, f"({current_minute}"))
    npu_rows, host_rows = [], []
    for minute, figures in stats.items():
        at = datetime.fromtimestamp(minute, tz=UTC)
        host = figures["host"]
        host_rows.append(
            HostMetricMinute(
                node_id=node_id,
                minute=at,
                samples=figures["samples"],
                **{
                    f"{column}_{kind}": host[name][i]
                    for name, column in HOST_COLUMNS.items()
                    for i, kind in enumerate(("mean", "max"))
                },
            )
        )
        for (npu_id, chip_id), chip in figures["npus"].items():
            npu_rows.append(
                NpuMetricMinute(
                    node_id=node_id,
                    npu_id=npu_id,
                    chip_id=chip_id,
                    minute=at,
                    samples=figures["counts"][(npu_id, chip_id)],
                    **{
                        f"{column}_{kind}": chip[name][i]
                        for name, column in NPU_COLUMNS.items()
                        for i, kind in enumerate(("mean", "max"))
                    },
                )
            )
    HostMetricMinute.objects.bulk_create(host_rows, ignore_conflicts=True)
    NpuMetricMinute.objects.bulk_create(npu_rows, ignore_conflicts=True)
    redis.set(store.downsampled_key(node_name), current_minute - 60)
    return len(host_rows) + len(npu_rows)


def downsample_all(now_epoch: float | None = None) -> int:
    now_epoch = now_epoch or datetime.now(UTC).timestamp()
    ids = dict(Node.objects.filter(name__in=store.known_nodes()).values_list("name", "id"))
    return sum(downsample_node(node_id, name, now_epoch) for name, node_id in ids.items())
