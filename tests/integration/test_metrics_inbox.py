"""The metrics inbox on a real Redis: what agents push, the panel worker's ingester takes, oldest first;
the backlog is capped; stale and malformed batches are dropped without stopping the others."""

import json
import time

import pytest

from panel.monitoring.metrics import store
from panel.monitoring.metrics.inbox import MetricsIngester
from panel.nodes.models import Node
from tests.metric_batches import a_batch
from workers import metrics_inbox
from workers.broker import broker_redis
from workers.identity import signature, split_inbox_line, use_keys

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(60)]


@pytest.fixture
def inbox(_wired_to_redis):
    broker_redis().delete(metrics_inbox.inbox_key())
    yield
    broker_redis().delete(metrics_inbox.inbox_key())


@pytest.fixture
def node(inbox):
    found = Node.objects.create(name="inbox-node", transport="agent")
    yield found
    store.forget_node(found.name)


@pytest.fixture
def any_node_key():
    """The pushing side holds a key for whatever node a test names (the queue tests never verify)."""
    use_keys(provider=lambda signer: b"k" * 64)


def payload(line: bytes) -> dict:
    return json.loads(split_inbox_line(line)[2])


@pytest.mark.usefixtures("any_node_key")
def test_batches_come_out_oldest_first_and_the_wait_ends_empty(inbox):
    for seq in (1, 2, 3, 4):
        metrics_inbox.push(a_batch("n", seq))
    first = metrics_inbox.wait_for_batch(wait_s=1)
    taken = [first, *metrics_inbox.take_queued()]
    assert [payload(raw)["seq"] for raw in taken] == [1, 2, 3, 4]
    assert metrics_inbox.take_queued() == []
    assert metrics_inbox.wait_for_batch(wait_s=0.1) is None


@pytest.mark.usefixtures("any_node_key")
def test_the_backlog_keeps_only_the_newest(inbox, monkeypatch):
    monkeypatch.setattr(metrics_inbox, "MAX_BACKLOG", 5)
    for seq in range(1, 9):
        metrics_inbox.push(a_batch("n", seq))
    assert broker_redis().llen(metrics_inbox.inbox_key()) == 5
    assert [payload(raw)["seq"] for raw in metrics_inbox.take_queued()] == [4, 5, 6, 7, 8]


def metrics_line_for_nobody() -> bytes:
    raw = a_batch("nobody-registered-this", seq=3).model_dump_json().encode()
    return b"nobody-registered-this %s %s" % (signature(b"k" * 64, b"metrics", raw).encode(), raw)


def test_the_ingester_stores_fresh_batches_and_drops_stale_and_malformed_ones(node):
    from panel.core.infra.refusals import rejected_counts

    broker_redis().rpush(metrics_inbox.inbox_key(), b"not json", b"[1, 2]")
    metrics_inbox.push(a_batch(node.name, seq=1, sent_ago_s=metrics_inbox.MAX_AGE_S + 60))
    metrics_inbox.push(a_batch(node.name, seq=2))
    broker_redis().rpush(metrics_inbox.inbox_key(), metrics_line_for_nobody())
    ingester = MetricsIngester()
    ingester.start()
    try:
        deadline = time.monotonic() + 30
        while broker_redis().llen(metrics_inbox.inbox_key()) and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        ingester.stop()  # it finishes the drain it took before it stops
    assert ingester.ingested == 1  # the fresh batch; the unknown node's is refused before ingest
    assert rejected_counts()["metrics"] >= 3  # two malformed, one for a node the panel does not know
    latest = store.read_latest([node.name])[node.name]
    assert latest["seq"] == 2
    assert latest["npus"][0]["aicore_pct"] == 2.0
    assert [sample["n"][0][2] for sample in store.read_ring(node.name, 0)] == [2.0]


def test_the_ring_buffer_drops_samples_older_than_its_span(node, settings, monkeypatch):
    from panel.monitoring import services

    settings.PANEL_METRICS_RING_SECONDS = 60
    monkeypatch.setattr(services, "RING_TRIM_S", 0)  # trim on every batch, not once a minute
    services.ingest_batches([a_batch(node.name, seq=1, sent_ago_s=300)])
    services.ingest_batches([a_batch(node.name, seq=2)])
    assert [sample["n"][0][2] for sample in store.read_ring(node.name, 0)] == [2.0]
