"""Old minute rows fold into hourly rows (panel.monitoring.metrics.rollup): weighted means, maxes of maxes,
nothing folded inside PANEL_METRICS_MINUTE_DAYS, the same result when folded twice, and the history API still
draws the folded hours."""

from datetime import UTC, datetime, timedelta

import pytest

from panel.monitoring.metrics.rollup import roll_up
from panel.monitoring.models import HostMetricMinute, NpuMetricMinute
from panel.monitoring.tasks import prune
from panel.nodes.models import Node
from tests.conftest import api_client_for

pytestmark = pytest.mark.django_db

NOW = datetime(2026, 12, 5, 12, 30, tzinfo=UTC)
OLD_HOUR = datetime(2026, 12, 1, 7, 0, tzinfo=UTC)  # older than the two minute days
RECENT = datetime(2026, 12, 4, 9, 0, tzinfo=UTC)  # inside them


@pytest.fixture
def node(settings):
    settings.PANEL_METRICS_MINUTE_DAYS = 2
    settings.PANEL_METRICS_RETENTION_DAYS = 30
    return Node.objects.create(name="rollup-node", address="127.0.0.1")


def npu_row(node, minute, samples, util, util_max, temp=None):
    return NpuMetricMinute(
        node=node,
        npu_id=3,
        chip_id=0,
        minute=minute,
        samples=samples,
        util_mean=util,
        util_max=util_max,
        temp_mean=temp,
        temp_max=temp,
    )


def test_an_old_hour_becomes_one_row_with_weighted_means_and_the_highest_max(node):
    NpuMetricMinute.objects.bulk_create(
        [
            npu_row(node, OLD_HOUR + timedelta(minutes=1), samples=60, util=10.0, util_max=20.0),
            npu_row(node, OLD_HOUR + timedelta(minutes=2), samples=20, util=50.0, util_max=90.0, temp=40.0),
            npu_row(node, OLD_HOUR + timedelta(minutes=59), samples=20, util=None, util_max=None, temp=60.0),
            npu_row(node, RECENT + timedelta(minutes=5), samples=60, util=1.0, util_max=1.0),
        ]
    )
    HostMetricMinute.objects.bulk_create(
        HostMetricMinute(node=node, minute=OLD_HOUR + timedelta(minutes=m), samples=60, cpu_mean=m, cpu_max=m)
        for m in range(60)
    )

    removed = roll_up(now=NOW)

    assert removed == (3 - 1) + (60 - 1)
    folded = NpuMetricMinute.objects.get(node=node, minute__lt=RECENT)
    assert folded.minute == OLD_HOUR
    assert folded.samples == 100
    assert folded.util_mean == round(
        (60 * 10.0 + 20 * 50.0) / 80, 3
    )  # the row without a figure weighs nothing
    assert folded.util_max == 90.0
    assert folded.temp_mean == 50.0
    assert folded.temp_max == 60.0
    host = HostMetricMinute.objects.get(node=node)
    assert (host.minute, host.samples, host.cpu_mean, host.cpu_max) == (OLD_HOUR, 3600, 29.5, 59)
    # Inside the minute days nothing moves.
    assert NpuMetricMinute.objects.filter(node=node, minute=RECENT + timedelta(minutes=5)).exists()

    assert roll_up(now=NOW) == 0
    again = NpuMetricMinute.objects.get(node=node, minute__lt=RECENT)
    assert (again.samples, again.util_mean, again.util_max) == (100, folded.util_mean, 90.0)


def test_a_long_backlog_is_folded_a_bounded_number_of_hours_per_run(node):
    first = OLD_HOUR - timedelta(hours=5)
    NpuMetricMinute.objects.bulk_create(
        npu_row(node, first + timedelta(hours=h, minutes=m), samples=1, util=float(m), util_max=float(m))
        for h in range(5)
        for m in (10, 20)
    )

    roll_up(now=NOW, max_hours=2)
    assert NpuMetricMinute.objects.count() == 2 + 3 * 2  # the two oldest hours folded
    assert NpuMetricMinute.objects.order_by("minute").first().minute == first

    roll_up(now=NOW, max_hours=10)
    assert sorted(NpuMetricMinute.objects.values_list("minute", flat=True)) == [
        first + timedelta(hours=h) for h in range(5)
    ]


def test_the_hourly_prune_folds_then_deletes_past_retention_and_history_reads_folded_hours(node, alice):
    now = datetime.now(UTC)  # the beat task reads the clock itself
    ancient = now - timedelta(days=31)
    old_hour = (now - timedelta(days=3)).replace(minute=0, second=0, microsecond=0)
    NpuMetricMinute.objects.bulk_create(
        [
            npu_row(node, ancient, samples=60, util=5.0, util_max=5.0),
            npu_row(node, old_hour + timedelta(minutes=30), samples=60, util=30.0, util_max=35.0),
            npu_row(node, old_hour + timedelta(minutes=40), samples=60, util=50.0, util_max=55.0),
        ]
    )

    assert prune() == 2  # one folded away, one past retention
    assert list(NpuMetricMinute.objects.values_list("minute", flat=True)) == [old_hour]

    since = (old_hour - timedelta(hours=1)).isoformat()
    history = api_client_for(alice).get(f"/api/v1/nodes/{node.pk}/metrics/", {"since": since}).json()
    assert history["source"] == "minutes"
    step = history["step"]
    assert history["time"] == [int(old_hour.timestamp() // step) * step]
    assert history["series"]["npu.3.0.util"] == [40.0]
    assert history["series"]["npu.3.0.util.max"] == [55.0]
