"""One node's poison lines through the real ingester (real Redis, the real database): a heartbeat with an
over-long field, one with an interval of 1e14 s, a sample stamped in year 1, each signed with the node's
own key, are refused and counted; the other node's lines of the same drain are recorded. A node row that
already holds an interval of 1e14 s breaks no page and no sweep."""

import json

import pytest

from panel.core.infra.refusals import rejected_counts
from panel.monitoring.metrics.inbox import MetricsIngester
from workers.contracts import utcnow
from workers.identity import inbox_line

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("_wired_to_redis")]


@pytest.fixture
def victim_and_attacker(db):
    from panel.nodes.models import Node

    return Node.objects.create(name="victim"), Node.objects.create(name="poisoner")


def beat_line(node: str, **fields) -> bytes:
    beat = {"node": node, "time": utcnow().isoformat(), "agent_version": "1", "interval_s": 1, **fields}
    return inbox_line(node, json.dumps({"heartbeat": beat}).encode(), kind="heartbeat")


def metrics_line(node: str, time: str | None = None) -> bytes:
    host = {"cpu_pct": 3.0, "memory_used_mb": 1.0, "memory_total_mb": 2.0, "load1": 0.1}
    sample = {"time": time or utcnow().isoformat(), "host": host, "npus": []}
    return inbox_line(node, json.dumps({"node": node, "samples": [sample], "seq": 1}).encode())


def test_one_nodes_poison_lines_are_refused_and_the_other_nodes_lines_of_the_drain_are_recorded(
    victim_and_attacker,
):
    from panel.monitoring import services
    from panel.monitoring.metrics import store

    services.nodes.forget()  # the node cache of an earlier test knows neither node
    victim, poisoner = victim_and_attacker
    before = rejected_counts().get("metrics", 0)
    drain = [
        beat_line("poisoner", agent_version="v" * 5000),
        beat_line("poisoner", interval_s=1e14),
        metrics_line("poisoner", time="0001-01-01T00:00:00+00:00"),
        beat_line("victim"),
        metrics_line("victim"),
    ]

    MetricsIngester().ingest_all(drain)

    victim.refresh_from_db()
    poisoner.refresh_from_db()
    assert victim.status == "online"
    assert store.read_latest(["victim"]).get("victim")
    assert poisoner.last_heartbeat is None
    assert poisoner.heartbeat_interval == 5.0
    assert rejected_counts().get("metrics", 0) == before + 3
    store.forget_node("victim")


def test_an_interval_of_1e14_s_already_stored_breaks_no_page_and_no_sweep(victim_and_attacker, alice, client):
    from datetime import timedelta

    from django.utils import timezone

    from panel.nodes.models import Node
    from panel.nodes.services import mark_silent_nodes_offline

    _victim, poisoner = victim_and_attacker
    frozen = timezone.now() - timedelta(days=1)
    Node.objects.filter(pk=poisoner.pk).update(
        heartbeat_interval=1e14, status="online", last_heartbeat=frozen
    )
    client.force_login(alice)

    for path in ("/", "/nodes/", "/api/v1/nodes/"):
        assert client.get(path).status_code == 200, path
    assert mark_silent_nodes_offline() == ["poisoner"]  # frozen a day: offline, not online for ever
