"""Agent event batches: duplicates ignored, order by seq, terminal states final."""

from datetime import UTC, datetime

import pytest

from panel.nodes.models import Node
from panel.operations.models import Operation
from panel.operations.services import ingest_events

pytestmark = pytest.mark.django_db


def batch(operation, *events, final_seq=None):
    return {
        "operation_id": str(operation.id),
        "node": operation.node.name,
        "final_seq": final_seq,
        "events": [
            {
                "seq": seq,
                "time": datetime(2026, 1, 1, 0, 0, seq % 60, tzinfo=UTC).isoformat(),
                "kind": kind,
                "payload": payload,
            }
            for seq, kind, payload in events
        ],
    }


@pytest.fixture
def operation():
    node = Node.objects.create(name="n1")
    return Operation.objects.create(kind="inventory", node=node, target="n1")


def test_it_ignores_replayed_batches(operation):
    first = batch(operation, (1, "state", {"state": "running"}), (2, "log", {"line": "a"}))
    assert len(ingest_events(first)) == 2
    assert ingest_events(first) == []
    assert list(operation.events.values_list("seq", flat=True)) == [1, 2]


def test_it_stores_out_of_order_batches_and_applies_only_newer_state(operation):
    late = batch(
        operation, (1, "state", {"state": "running"}), (2, "progress", {"percent": 10, "stage": "early"})
    )
    final = batch(
        operation,
        (3, "progress", {"percent": 90, "stage": "late"}),
        (4, "state", {"state": "succeeded", "result": {"ok": True}}),
        final_seq=4,
    )
    ingest_events(final)
    ingest_events(late)
    operation.refresh_from_db()
    assert list(operation.events.order_by("seq").values_list("seq", flat=True)) == [1, 2, 3, 4]
    assert operation.status == "succeeded"
    assert operation.progress == 100.0
    assert operation.stage == "late"
    assert (operation.last_seq, operation.final_seq) == (4, 4)


def test_a_terminal_state_is_final(operation):
    ingest_events(batch(operation, (1, "state", {"state": "failed", "error": "boom", "hint": "fix it"})))
    ingest_events(batch(operation, (2, "state", {"state": "succeeded"})))
    operation.refresh_from_db()
    assert (operation.status, operation.error, operation.hint) == ("failed", "boom", "fix it")


def test_it_drops_events_of_an_unknown_operation(operation):
    stray = batch(operation, (1, "log", {"line": "x"}))
    stray["operation_id"] = "00000000-0000-0000-0000-000000000000"
    assert ingest_events(stray) == []


def test_it_rejects_a_malformed_batch(operation):
    from pydantic import ValidationError

    with pytest.raises(ValidationError):
        ingest_events(
            {"operation_id": str(operation.id), "node": "n1", "events": [{"seq": 0, "kind": "log"}]}
        )
