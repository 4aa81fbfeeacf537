"""Agents' heartbeats through the metrics inbox (workers.metrics_inbox.push_heartbeat): the real line format,
the real ingester's drain, real Redis for the nonces. A heartbeat marks its own node online; one signed by
another node, replayed, sealed as metrics, or from a removed node changes nothing and is counted."""

import pytest

from panel.monitoring.metrics.inbox import MetricsIngester
from tests.node_trust import as_node_a, rejected
from workers.contracts import Heartbeat, HeartbeatLine, utcnow
from workers.identity import inbox_line

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("_wired_to_redis")]


def heartbeat_line(node: str, signer: str | None = None, kind: str = "heartbeat", **fields) -> bytes:
    beat = Heartbeat(node=node, time=utcnow(), agent_version="2.1", interval_s=5, **fields)
    return inbox_line(signer or node, HeartbeatLine(heartbeat=beat).model_dump_json().encode(), kind=kind)


def test_a_heartbeat_line_marks_its_node_online_with_what_it_says(nodes_a_and_b):
    node_a, _ = nodes_a_and_b
    as_node_a(nodes_a_and_b)

    MetricsIngester().ingest_all([heartbeat_line("node-a", running=["op-1"], done=["op-0"])])

    node_a.refresh_from_db()
    assert node_a.status == "online"
    assert node_a.last_heartbeat is not None
    assert (node_a.agent_version, node_a.agent_running, node_a.agent_done) == ("2.1", ["op-1"], ["op-0"])
    assert node_a.agent_reported_at is not None  # what the reaper trusts the lists by


def test_heartbeats_ride_one_drain_with_metrics_and_each_node_is_recorded(nodes_a_and_b):
    from panel.nodes.agents.trust import agent_key
    from panel.nodes.models import Node
    from workers.identity import use_keys

    use_keys({node.name: agent_key(node) for node in nodes_a_and_b})

    MetricsIngester().ingest_all([heartbeat_line("node-a"), heartbeat_line("node-b")])

    assert set(Node.objects.filter(status="online").values_list("name", flat=True)) == {"node-a", "node-b"}


def test_a_forged_replayed_or_mislabelled_heartbeat_line_changes_nothing(nodes_a_and_b):
    node_a, node_b = nodes_a_and_b
    as_node_a(nodes_a_and_b)
    before = rejected("heartbeat")
    own = heartbeat_line("node-a")

    MetricsIngester().ingest_all(
        [
            heartbeat_line("node-b", signer="node-a"),  # A speaking for B
            heartbeat_line("node-a", kind="metrics"),  # a seal for metrics over a heartbeat
        ]
    )
    node_a.refresh_from_db()
    node_b.refresh_from_db()
    assert (node_a.last_heartbeat, node_b.last_heartbeat) == (None, None)
    assert rejected("heartbeat") == before + 2

    MetricsIngester().ingest_all([own])
    node_a.refresh_from_db()
    first = node_a.last_heartbeat
    assert first is not None
    MetricsIngester().ingest_all([own])  # captured and sent again
    node_a.refresh_from_db()
    assert node_a.last_heartbeat == first
    assert rejected("heartbeat") == before + 3


def test_a_removed_nodes_heartbeat_line_is_refused(nodes_a_and_b):
    node_a, _ = nodes_a_and_b
    as_node_a(nodes_a_and_b)
    node_a.delete()
    before = rejected("heartbeat")

    MetricsIngester().ingest_all([heartbeat_line("node-a")])

    assert rejected("heartbeat") == before + 1


def steady(nodes_a_and_b):
    """Both nodes online, inventoried, run by their own agents: their beats take the one-UPDATE path."""
    from django.utils import timezone

    from panel.nodes.agents.trust import agent_key
    from panel.nodes.models import Node
    from workers.identity import use_keys

    Node.objects.update(status="online", transport="agent", inventoried_at=timezone.now())
    use_keys({node.name: agent_key(node) for node in nodes_a_and_b})


def test_a_drains_steady_heartbeats_are_one_update_each_with_its_own_lists(nodes_a_and_b):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    node_a, node_b = nodes_a_and_b
    steady(nodes_a_and_b)
    lines = [
        heartbeat_line("node-a", running=["op-old"]),
        heartbeat_line("node-b", done=["op-b"]),
        heartbeat_line("node-a", running=["op-a"]),  # the same node's later beat in the drain wins
    ]

    with CaptureQueriesContext(connection) as queries:
        MetricsIngester().ingest_all(lines)

    updates = [q["sql"] for q in queries.captured_queries if q["sql"].startswith("UPDATE")]
    assert len(updates) == 1, updates
    node_a.refresh_from_db()
    node_b.refresh_from_db()
    assert (node_a.agent_running, node_a.agent_done) == (["op-a"], [])
    assert (node_b.agent_running, node_b.agent_done) == ([], ["op-b"])
    assert node_a.last_heartbeat == node_b.last_heartbeat == node_a.agent_reported_at is not None
    assert node_a.heartbeat_interval == 5
    assert node_b.agent_version == "2.1"


def test_a_steady_drain_writes_only_what_its_beats_changed_and_reads_no_inventory(nodes_a_and_b):
    """Beats that repeat what the rows hold move only the times: no CASE of every node per field to build,
    and the nodes' inventory (facts, raw npu-smi text) is not read for the check."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    node_a, node_b = nodes_a_and_b
    steady(nodes_a_and_b)
    MetricsIngester().ingest_all([heartbeat_line("node-a", running=["op-a"]), heartbeat_line("node-b")])

    with CaptureQueriesContext(connection) as queries:
        MetricsIngester().ingest_all(
            [heartbeat_line("node-a", running=["op-a"]), heartbeat_line("node-b", done=["op-b"])]
        )
    (update,) = [q["sql"] for q in queries.captured_queries if q["sql"].startswith("UPDATE")]
    assert '"agent_done" = CASE' in update, update
    for unchanged in ('"agent_running"', '"agent_version"', '"heartbeat_interval"'):
        assert unchanged not in update, update
    assert all("npu_smi_info" not in q["sql"] for q in queries.captured_queries)
    node_a.refresh_from_db()
    node_b.refresh_from_db()
    assert (node_a.agent_running, node_a.agent_done) == (["op-a"], [])
    assert (node_b.agent_running, node_b.agent_done) == ([], ["op-b"])
    assert node_a.agent_reported_at == node_b.agent_reported_at == node_b.last_heartbeat is not None

    with CaptureQueriesContext(connection) as queries:
        MetricsIngester().ingest_all(
            [heartbeat_line("node-a", running=["op-a"]), heartbeat_line("node-b", done=["op-b"])]
        )
    (update,) = [q["sql"] for q in queries.captured_queries if q["sql"].startswith("UPDATE")]
    assert "CASE" not in update, update
    node_b.refresh_from_db()
    assert node_b.agent_done == ["op-b"]


def test_a_node_swept_offline_after_its_row_was_read_comes_back_through_the_locked_path(nodes_a_and_b):
    from panel.nodes.models import Node
    from panel.nodes.services import record_drained_heartbeats
    from panel.nodes.signals import node_online

    node_a, _ = nodes_a_and_b
    steady(nodes_a_and_b)
    read_as_online = Node.objects.get(pk=node_a.pk)
    Node.objects.filter(pk=node_a.pk).update(status="offline")  # the sweep, between the read and the write
    came_online = []
    node_online.connect(receiver := lambda sender, node, **_: came_online.append(node.name), weak=False)
    try:
        beat = Heartbeat(node="node-a", time=utcnow(), agent_version="2.1", interval_s=5, running=["op-1"])
        record_drained_heartbeats([("node-a", beat, read_as_online)])
    finally:
        node_online.disconnect(receiver)

    node_a.refresh_from_db()
    assert node_a.status == "online"
    assert node_a.agent_running == ["op-1"]
    assert came_online == ["node-a"]


def test_in_a_steady_drain_a_nodes_beat_for_another_changes_only_its_own_row(nodes_a_and_b):
    """The one-UPDATE path writes rows by the node each verified beat is about: A's forged beat for B, riding
    the same drain as A's own, leaves B's row as it was."""
    from panel.nodes.models import Node

    node_a, node_b = nodes_a_and_b
    steady(nodes_a_and_b)
    as_node_a(nodes_a_and_b)  # this process now holds A's credential only
    b_before = Node.objects.get(pk=node_b.pk)
    before = rejected("heartbeat")

    MetricsIngester().ingest_all(
        [
            heartbeat_line("node-a", running=["op-a"]),
            heartbeat_line("node-b", signer="node-a", running=["evil"]),
        ]
    )

    node_a.refresh_from_db()
    node_b.refresh_from_db()
    assert node_a.agent_running == ["op-a"]
    assert (node_b.agent_running, node_b.last_heartbeat, node_b.updated) == (
        b_before.agent_running,
        b_before.last_heartbeat,
        b_before.updated,
    )
    assert rejected("heartbeat") == before + 1


def test_a_drain_redis_fails_is_dropped_and_the_next_one_is_recorded(nodes_a_and_b, monkeypatch):
    """Redis restarting mid-drain: the nonce check raises. The ingester thread must not die with it (it
    would stop every heartbeat and sample this worker takes until the worker restarts)."""
    import redis

    node_a, _ = nodes_a_and_b
    as_node_a(nodes_a_and_b)
    ingester = MetricsIngester()

    def redis_gone(items):
        raise redis.ConnectionError("Connection refused")

    monkeypatch.setattr("panel.nodes.agents.trust.first_sights", redis_gone)
    ingester.ingest_all([heartbeat_line("node-a")])  # logged, not raised
    node_a.refresh_from_db()
    assert node_a.status != "online"

    monkeypatch.undo()  # Redis is back
    ingester.ingest_all([heartbeat_line("node-a")])
    node_a.refresh_from_db()
    assert node_a.status == "online"


def test_a_drains_metrics_are_published_before_its_heartbeats_are_written(nodes_a_and_b, monkeypatch):
    from panel.monitoring.metrics import inbox, store
    from tests.integration.test_metrics_inbox import a_batch
    from workers.identity import inbox_line as sealed

    node_a, _ = nodes_a_and_b
    as_node_a(nodes_a_and_b)
    seen_when_beats_written = []

    def record(beats):
        latest = store.read_latest(["node-a"]).get("node-a")
        seen_when_beats_written.append(latest and latest["seq"])

    monkeypatch.setattr(inbox, "record_heartbeats", record)
    metrics = sealed("node-a", a_batch("node-a", seq=7).model_dump_json().encode(), kind="metrics")
    MetricsIngester().ingest_all([heartbeat_line("node-a"), metrics])

    assert seen_when_beats_written == [7]
    store.forget_node(node_a.name)
