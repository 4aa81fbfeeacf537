"""The ingest path finds its node and operation without an ORDER BY (panel.core.models.one_or_none): Django
compiles one for the model's Meta.ordering against every selected column, a tenth of the panel worker's CPU
at fleet size (bench/fleet.py). Heartbeats and event batches still find what `.first()` found."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from panel.core.models import one_or_none
from panel.nodes.models import Node
from panel.nodes.services import record_heartbeat
from panel.operations.models import Operation
from tests.integration.conftest import event_batch, ingest_as_its_node
from workers.contracts import Heartbeat, utcnow

pytestmark = pytest.mark.django_db


@pytest.fixture
def operation():
    node = Node.objects.create(name="lookup-node", transport="agent", inventoried_at=utcnow())
    return Operation.objects.create(kind="inventory", node=node, target=node.name)


def lookups(queries, table: str) -> list[str]:
    return [q["sql"] for q in queries if q["sql"].startswith("SELECT") and f'FROM "{table}"' in q["sql"]]


def test_one_or_none_gives_the_row_or_none(operation):
    assert one_or_none(Node.objects.filter(name="lookup-node")) == operation.node
    assert one_or_none(Node.objects.filter(name="no-such-node")) is None


def test_a_heartbeat_finds_its_node_without_ordering(operation):
    beat = Heartbeat(node="lookup-node", time=utcnow(), agent_version="1", running=[str(operation.id)])
    with CaptureQueriesContext(connection) as captured:
        node = record_heartbeat(beat.model_dump(mode="json"), signer="lookup-node")
    assert node.pk == operation.node.pk
    assert Node.objects.get(pk=node.pk).agent_running == [str(operation.id)]
    found = lookups(captured.captured_queries, "nodes_node")
    assert found
    assert not any("ORDER BY" in sql for sql in found)


def test_an_event_batch_finds_its_operation_without_ordering(operation):
    batch = event_batch(operation, (1, "state", {"state": "running"}), (2, "log", {"line": "a"}))
    with CaptureQueriesContext(connection) as captured:
        assert len(ingest_as_its_node(batch)) == 2
    operation.refresh_from_db()
    assert operation.status == "running"
    found = lookups(captured.captured_queries, "operations_operation")
    assert found
    assert not any("ORDER BY" in sql for sql in found)


def test_an_event_batch_for_no_known_operation_is_still_dropped(operation):
    stray = event_batch(operation, (1, "log", {"line": "x"}))
    stray["operation_id"] = "00000000-0000-0000-0000-000000000000"
    assert ingest_as_its_node(stray) == []


def test_an_event_batch_reads_no_node_row_but_the_senders_check(operation):
    """The node's row, as the envelope's check read it, is the one the batch's operation is matched against:
    no second read of the node (with its facts and npu-smi text) per batch."""
    from panel.operations.services import ingest_events

    sender = Node.objects.get(name="lookup-node")
    batch = event_batch(operation, (1, "state", {"state": "running"}))
    with CaptureQueriesContext(connection) as captured:
        assert len(ingest_events(batch, sender=sender)) == 1
    assert lookups(captured.captured_queries, "nodes_node") == []
    assert not any('JOIN "nodes_node"' in q["sql"] for q in captured.captured_queries)


def test_an_event_batch_about_another_nodes_operation_is_refused(operation):
    from panel.operations.services import ingest_events

    other = Node.objects.create(name="other-node", transport="agent", inventoried_at=utcnow())
    batch = event_batch(operation, (1, "state", {"state": "running"}))
    assert ingest_events(batch, sender=other) == []
    operation.refresh_from_db()
    assert operation.status != "running"


def test_the_offline_sweep_reads_whole_rows_of_the_silent_nodes_only():
    """Every 2 s over every online node: their heartbeat columns, and whole rows (facts, npu-smi text) of
    the ones it takes offline."""
    from datetime import timedelta

    from django.utils import timezone

    from panel.nodes.services import mark_silent_nodes_offline

    now = timezone.now()
    for name, heard in [("beating-1", now), ("beating-2", now), ("silent-1", now - timedelta(minutes=5))]:
        Node.objects.create(
            name=name, transport="agent", status="online", last_heartbeat=heard, facts={"cpu": "x" * 1000}
        )
    with CaptureQueriesContext(connection) as captured:
        assert mark_silent_nodes_offline(now=now) == ["silent-1"]
    whole = [sql for sql in lookups(captured.captured_queries, "nodes_node") if '"facts"' in sql]
    assert len(whole) == 1
    silent_pk = Node.objects.get(name="silent-1").pk
    assert f"IN ({silent_pk})" in whole[0]
    assert Node.objects.get(name="beating-1").status == "online"
