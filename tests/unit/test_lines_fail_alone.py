"""Each node's lines fail alone: every field of what agents send is bounded (workers.contracts), a node's
silence is measured with a clamped interval (panel.nodes.models.silent_limit), a drain applies each node's
lines apart when applying them together fails (panel.monitoring.metrics.inbox.each_node_alone), and each
sender has its own rate per kind (panel.monitoring.metrics.rates)."""

from datetime import UTC, datetime, timedelta

import pytest
from pydantic import ValidationError

from workers.contracts import EventBatch, Heartbeat, MetricBatch, utcnow


def a_beat(**fields) -> dict:
    return {"node": "n1", "time": utcnow().isoformat(), "agent_version": "1", "interval_s": 5, **fields}


@pytest.mark.parametrize(
    "fields",
    [
        {"interval_s": 1e14},
        {"interval_s": 0},
        {"interval_s": float("nan")},
        {"time": datetime(1, 1, 1, tzinfo=UTC).isoformat()},
        {"agent_version": "v" * 33},
        {"node": "n" * 64},
        {"running": ["x" * 65]},
    ],
    ids=lambda fields: next(iter(fields)),
)
def test_a_heartbeat_out_of_its_bounds_is_refused_when_read(fields):
    with pytest.raises(ValidationError):
        Heartbeat.model_validate(a_beat(**fields))


def a_sample(**host) -> dict:
    figures = {"cpu_pct": 1.0, "memory_used_mb": 1.0, "memory_total_mb": 2.0, "load1": 0.1, **host}
    return {"time": utcnow().isoformat(), "host": figures, "npus": []}


@pytest.mark.parametrize(
    "batch",
    [
        {"samples": [{**a_sample(), "time": "0001-01-01T00:00:00+00:00"}]},
        {"samples": [a_sample(cpu_pct=1e300)]},
        {"samples": [a_sample(load1=-1)]},
        {"samples": [a_sample()], "sent_at": "9999-12-31T23:59:59+00:00"},
        {"samples": [{**a_sample(), "error": "e" * 5000}]},
        {"samples": [{**a_sample(), "npus": [{"npu_id": -1, "chip_id": 0}]}]},
    ],
)
def test_a_metrics_batch_out_of_its_bounds_is_refused_when_read(batch):
    with pytest.raises(ValidationError):
        MetricBatch.model_validate({"node": "n1", **batch})


def test_an_event_batch_with_a_time_in_year_one_or_an_overlong_id_is_refused():
    event = {"seq": 1, "time": "0001-01-01T00:00:00+00:00", "kind": "log", "payload": {}}
    with pytest.raises(ValidationError):
        EventBatch.model_validate({"operation_id": "op", "node": "n1", "events": [event]})
    with pytest.raises(ValidationError):
        EventBatch.model_validate({"operation_id": "o" * 65, "node": "n1", "events": []})


def test_what_agents_send_today_passes():
    Heartbeat.model_validate(a_beat(running=["3f1c2b9e-0d7a-4e55-9a44-2f3b1f6c8d10"]))
    MetricBatch.model_validate({"node": "n1", "samples": [a_sample()], "sent_at": utcnow().isoformat()})


def test_a_stored_interval_of_1e14_s_neither_overflows_nor_keeps_a_frozen_node_online(settings):
    from panel.nodes.models import Node, silent_limit

    assert silent_limit(1e14) == timedelta(hours=3)
    node = Node(name="frozen", transport="agent", status="online", heartbeat_interval=1e14)
    node.last_heartbeat = datetime.now(UTC) - timedelta(days=1)
    assert node.effective_status == "offline"


def test_one_nodes_failing_lines_cost_that_node_only(caplog):
    from panel.monitoring.metrics.inbox import each_node_alone

    applied = []

    def apply(items):
        if any(node == "poison" for node, _ in items):
            raise OverflowError("date value out of range")
        applied.extend(items)

    items = [("good-1", 1), ("poison", 2), ("good-2", 3)]
    each_node_alone(apply, items, lambda item: item[0], "metrics")
    assert applied == [("good-1", 1), ("good-2", 3)]
    with pytest.raises(OverflowError):  # every node failing is the panel's trouble, not a node's
        each_node_alone(apply, [("poison", 1)], lambda item: item[0], "metrics")


def test_each_sender_and_kind_has_its_own_bucket(settings):
    from panel.monitoring.metrics.rates import Buckets

    settings.PANEL_INGEST_METRICS_PER_S, settings.PANEL_INGEST_HEARTBEATS_PER_S = 1, 1
    buckets = Buckets()
    flood = [buckets.take("node.a", "a", "metrics", now=0.0) for _ in range(100)]
    assert sum(flood) == 5  # its burst, then nothing until the bucket refills
    assert buckets.take("node.a", "a", "heartbeat", now=0.0)  # its heartbeats are not its metrics
    assert buckets.take("node.b", "b", "metrics", now=0.0)  # nor another node's
    assert buckets.take("node.a", "b", "metrics", now=0.0)  # naming b spends a's own tokens, not b's
    assert buckets.take("node.a", "a", "metrics", now=1.0)  # a second later: one more


def test_the_reader_hands_out_heartbeats_before_any_metrics_and_says_who_published_each():
    from types import SimpleNamespace

    from workers import metrics_inbox

    class Idle:
        def drain_events(self, timeout):
            raise TimeoutError

    reader = metrics_inbox.AmqpReader()
    reader._connection = Idle()
    for n in range(3):
        flood = {"routing_key": "metrics"}
        reader._on_message(
            SimpleNamespace(body=b"m%d" % n, delivery_info=flood, properties={"user_id": "node.x"})
        )
    beat = SimpleNamespace(
        body=b"hb", delivery_info={"routing_key": "heartbeat"}, properties={"user_id": "node.y"}
    )
    reader._on_message(beat)

    taken = reader.take(2)
    assert taken == [b"hb", b"m0", b"m1"]
    assert [line.user for line in taken] == ["node.y", "node.x", "node.x"]
