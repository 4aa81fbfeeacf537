"""Hourly roll-up of old metric history, so the minute tables stay small at fleet size.

Minute rows older than PANEL_METRICS_MINUTE_DAYS are folded, per node (and NPU chip) and hour, into one row
in the same table whose `minute` is the hour's start: `samples` is the sum, each mean the mean weighted by
samples over the rows that had the figure, each max the max. The history API reads both kinds alike (a
chart of last month gets one point an hour). Folding an hour again gives the same row, so an interrupted
run loses nothing; rows are deleted and the roll-up written in one transaction per hour, and two runs at
once (a stalled beat leader beside the new one) collide on the tables' unique constraint, so one of them
rolls back. A run folds at most MAX_HOURS_PER_RUN hours (oldest first) and the next run carries
on, so the first run after an upgrade does not hold the database for hours.
"""

from datetime import UTC, datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import Case, Count, F, FloatField, Max, Sum, When
from django.db.models.functions import ExtractMinute, TruncHour

from panel.monitoring.models import HostMetricMinute, NpuMetricMinute

MAX_HOURS_PER_RUN = 48

HOST_FIGURES = ("cpu", "memory_used", "load1")
NPU_FIGURES = ("util", "hbm_used", "memory_used", "power", "temp")


def roll_up(now: datetime | None = None, max_hours: int = MAX_HOURS_PER_RUN) -> int:
    """Fold whole hours of minute rows older than the cutoff; returns the rows removed (net)."""
    now = now or datetime.now(UTC)
    cutoff = _hour_of(now - timedelta(days=settings.PANEL_METRICS_MINUTE_DAYS))
    removed = 0
    for model, keys, figures in (
        (NpuMetricMinute, ("node_id", "npu_id", "chip_id"), NPU_FIGURES),
        (HostMetricMinute, ("node_id",), HOST_FIGURES),
    ):
        for hour in _hours_to_fold(model, cutoff, max_hours):
            removed += _fold_hour(model, keys, figures, hour)
    return removed


def _hour_of(moment: datetime) -> datetime:
    return moment.replace(minute=0, second=0, microsecond=0)


def _hours_to_fold(model, cutoff: datetime, max_hours: int) -> list[datetime]:
    """Hours before the cutoff that still hold a row off the hour's start (UTC, whatever TIME_ZONE says),
    oldest first."""
    unfolded = (
        model.objects.filter(minute__lt=cutoff)
        .annotate(minute_of_hour=ExtractMinute("minute", tzinfo=UTC))
        .exclude(minute_of_hour=0)
    )
    hours = unfolded.annotate(hour=TruncHour("minute", tzinfo=UTC)).values_list("hour", flat=True)
    return list(hours.distinct().order_by("hour")[:max_hours])


def _fold_hour(model, keys: tuple[str, ...], figures: tuple[str, ...], hour: datetime) -> int:
    """Replace the hour's rows by one row per key; returns how many rows fewer there are."""
    in_hour = model.objects.filter(minute__gte=hour, minute__lt=hour + timedelta(hours=1))
    sums = {"rows": Count("pk"), "samples_sum": Sum("samples")}
    for figure in figures:
        sums[f"{figure}_weighted"] = Sum(F(f"{figure}_mean") * F("samples"), output_field=FloatField())
        sums[f"{figure}_weight"] = Sum(Case(When(**{f"{figure}_mean__isnull": False}, then=F("samples"))))
        sums[f"{figure}_top"] = Max(f"{figure}_max")
    with transaction.atomic():
        groups = list(in_hour.values(*keys).annotate(**sums).order_by(*keys))
        in_hour.delete()
        model.objects.bulk_create(model(minute=hour, **_folded_row(group, keys, figures)) for group in groups)
    return sum(group["rows"] for group in groups) - len(groups)


def _folded_row(group: dict, keys: tuple[str, ...], figures: tuple[str, ...]) -> dict:
    row = {key: group[key] for key in keys}
    row["samples"] = group["samples_sum"] or 0
    for figure in figures:
        weight = group[f"{figure}_weight"]
        row[f"{figure}_mean"] = round(group[f"{figure}_weighted"] / weight, 3) if weight else None
        row[f"{figure}_max"] = group[f"{figure}_top"]
    return row
