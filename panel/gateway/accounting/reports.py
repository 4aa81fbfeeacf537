"""The figures of the usage page and its CSV, from the hourly roll-ups (and the raw rows for errors)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db.models import Count, F, Sum
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from panel.gateway.accounting.usage import hour_of
from panel.gateway.models import UsageHour, UsageRecord

RANGES = {
    "24h": (_("Last 24 hours"), timedelta(hours=24), timedelta(hours=1)),
    "7d": (_("Last 7 days"), timedelta(days=7), timedelta(hours=1)),
    "30d": (_("Last 30 days"), timedelta(days=30), timedelta(days=1)),
    "365d": (_("Last year"), timedelta(days=365), timedelta(days=1)),
}
DEFAULT_RANGE = "24h"
CHART_SERIES = 6  # the biggest keys or models get a line each; the rest share one
SUMS = (
    "requests",
    "errors",
    "prompt_tokens",
    "completion_tokens",
    "ttft_ms_sum",
    "ttft_count",
    "duration_ms_sum",
)


@dataclass(frozen=True)
class Selection:
    range: str
    since: datetime
    step: timedelta  # the chart's bucket: an hour, or a day over long ranges
    key: str = ""
    model: str = ""

    @classmethod
    def from_query(cls, query, now: datetime | None = None) -> Selection:
        name = query.get("range") if query.get("range") in RANGES else DEFAULT_RANGE
        _label, span, step = RANGES[name]
        now = now or timezone.now()
        return cls(name, hour_of(now - span), step, query.get("key", "")[:255], query.get("model", "")[:128])


def hours(user, selection: Selection):
    queryset = UsageHour.objects.visible_to(user).filter(hour__gte=selection.since)
    if selection.key:
        queryset = queryset.filter(key=selection.key)
    if selection.model:
        queryset = queryset.filter(model=selection.model)
    return queryset


def _with_totals(rows) -> list[dict]:
    out = []
    for row in rows:
        row = dict(row)
        row["tokens"] = (row["prompt_tokens"] or 0) + (row["completion_tokens"] or 0)
        row["ttft_ms"] = row["ttft_ms_sum"] / row["ttft_count"] if row.get("ttft_count") else None
        out.append(row)
    return out


def grouped(queryset, field: str, limit: int | None = None) -> list[dict]:
    """Sums per `field` (key or model), the most tokens first."""
    rows = (
        queryset.values(field)
        .annotate(**{name: Sum(name) for name in SUMS})
        .annotate(total=F("prompt_tokens") + F("completion_tokens"))
        .order_by("-total", field)
    )
    return _with_totals(rows[:limit] if limit else rows)


def totals(queryset) -> dict:
    row = queryset.aggregate(**{name: Sum(name) for name in SUMS})
    return _with_totals([{name: row[name] or 0 for name in SUMS}])[0]


def _bucket(when: datetime, step: timedelta) -> datetime:
    if step >= timedelta(days=1):
        local = timezone.localtime(when)
        return local.replace(hour=0, minute=0, second=0, microsecond=0)
    return when


def series(queryset, field: str, selection: Selection, now: datetime | None = None) -> dict:
    """Tokens per bucket for the biggest values of `field`: {"x": [epoch s], "names": [...], "values":
    [[...] per name]}; the rest summed under "" (the page names it "other")."""
    now = now or timezone.now()
    top = [row[field] for row in grouped(queryset, field, CHART_SERIES)]
    rows = (
        queryset.values("hour", field)
        .annotate(tokens=Sum(F("prompt_tokens") + F("completion_tokens")))
        .order_by("hour")
    )
    start = _bucket(selection.since, selection.step)
    buckets = []
    current = start
    while current <= now:
        buckets.append(current)
        current += selection.step
    index = {bucket: i for i, bucket in enumerate(buckets)}
    names = list(top)
    values = {name: [0] * len(buckets) for name in names}
    other = [0] * len(buckets)
    for row in rows:
        position = index.get(_bucket(row["hour"], selection.step))
        if position is None:
            continue
        target = values.get(row[field], other)
        target[position] += row["tokens"] or 0
    if any(other):
        names.append("")
        values[""] = other
    return {
        "x": [int(bucket.timestamp()) for bucket in buckets],
        "names": names,
        "values": [values[name] for name in names],
    }


def recent_errors(user, selection: Selection, limit: int = 50):
    queryset = UsageRecord.objects.visible_to(user).filter(time__gte=selection.since, status__gte=400)
    if selection.key:
        queryset = queryset.filter(key=selection.key)
    if selection.model:
        queryset = queryset.filter(model=selection.model)
    return queryset.order_by("-time")[:limit]


def error_counts(user, selection: Selection) -> list[dict]:
    queryset = UsageRecord.objects.visible_to(user).filter(time__gte=selection.since, status__gte=400)
    if selection.key:
        queryset = queryset.filter(key=selection.key)
    if selection.model:
        queryset = queryset.filter(model=selection.model)
    return list(
        queryset.values("status", "error")
        .annotate(count=Count("id"))
        .order_by("-count", "status", "error")[:20]
    )
