"""Agent event batches: duplicates ignored, order by seq, terminal states final."""

import pytest

from panel.nodes.models import Node
from panel.operations.models import Operation
from tests.integration.conftest import event_batch, ingest_as_its_node

pytestmark = pytest.mark.django_db


@pytest.fixture
def operation():
    node = Node.objects.create(name="n1")
    return Operation.objects.create(kind="inventory", node=node, target="n1")


def test_it_ignores_replayed_batches(operation):
    first = event_batch(operation, (1, "state", {"state": "running"}), (2, "log", {"line": "a"}))
    assert len(ingest_as_its_node(first)) == 2
    assert ingest_as_its_node(first) == []
    assert list(operation.events.values_list("seq", flat=True)) == [1, 2]


def test_it_stores_out_of_order_batches_and_applies_only_newer_state(operation):
    late = event_batch(
        operation, (1, "state", {"state": "running"}), (2, "progress", {"percent": 10, "stage": "early"})
    )
    final = event_batch(
        operation,
        (3, "progress", {"percent": 90, "stage": "late"}),
        (4, "state", {"state": "succeeded", "result": {"ok": True}}),
        final_seq=4,
    )
    ingest_as_its_node(final)
    ingest_as_its_node(late)
    operation.refresh_from_db()
    assert list(operation.events.order_by("seq").values_list("seq", flat=True)) == [1, 2, 3, 4]
    assert operation.status == "succeeded"
    assert operation.progress == 100.0
    assert operation.stage == "late"
    assert (operation.last_seq, operation.final_seq) == (4, 4)


def test_a_terminal_state_is_final(operation):
    ingest_as_its_node(
        event_batch(operation, (1, "state", {"state": "failed", "error": "boom", "hint": "fix it"}))
    )
    ingest_as_its_node(event_batch(operation, (2, "state", {"state": "succeeded"})))
    operation.refresh_from_db()
    assert (operation.status, operation.error, operation.hint) == ("failed", "boom", "fix it")


def test_it_drops_events_of_an_unknown_operation(operation):
    stray = event_batch(operation, (1, "log", {"line": "x"}))
    stray["operation_id"] = "00000000-0000-0000-0000-000000000000"
    assert ingest_as_its_node(stray) == []


def test_it_rejects_a_malformed_batch(operation):
    from pydantic import ValidationError

    with pytest.raises(ValidationError):
        ingest_as_its_node(
            {"operation_id": str(operation.id), "node": "n1", "events": [{"seq": 0, "kind": "log"}]}
        )


def test_a_batch_is_never_taken_without_its_sender(operation):
    from panel.operations.services import ingest_events

    with pytest.raises(TypeError, match="sender"):
        ingest_events(event_batch(operation, (1, "state", {"state": "succeeded"})))
    assert not operation.events.exists()


def test_a_batch_repeating_the_attempt_number_after_the_end_keeps_the_terminal_state(operation):
    ingest_as_its_node(
        event_batch(
            operation,
            (1, "state", {"state": "running"}),
            (2, "state", {"state": "succeeded", "result": {"ok": "first"}}),
            final_seq=2,
        )
    )
    operation.refresh_from_db()
    finished = operation.finished
    # The same attempt number again (a redelivery after the agent lost its lease record, or a replay):
    # numbers beyond the end, a new result, a progress — stored in the log, applied to nothing.
    ingest_as_its_node(
        event_batch(
            operation,
            (3, "progress", {"percent": 5, "stage": "again"}),
            (4, "state", {"state": "succeeded", "result": {"ok": "forged"}}),
        )
    )
    ingest_as_its_node(
        {**event_batch(operation, (1, "state", {"state": "failed", "error": "x"})), "attempt": 2}
    )
    operation.refresh_from_db()
    assert (operation.status, operation.result, operation.error) == ("succeeded", {"ok": "first"}, "")
    assert (operation.progress, operation.finished, operation.attempt) == (100.0, finished, 1)
    assert operation.events.count() == 5


@pytest.mark.usefixtures("_wired_to_redis")
def test_a_batch_that_finds_the_panels_redis_away_is_retried_not_lost(operation, monkeypatch):
    """The nonce check needs the panel's Redis; a batch arriving while it restarts waits and comes again."""
    import redis

    from panel.nodes.agents import trust
    from panel.operations.tasks import ingest_events
    from workers.identity import seal_for_panel, use_keys
    from workers.task_names import INGEST_EVENTS

    use_keys({"n1": trust.agent_key(operation.node)})
    checks, real_first_sight = [], trust.first_sight

    def redis_restarting_once(signer, stamp):
        checks.append(signer)
        if len(checks) == 1:
            raise redis.ConnectionError("Error 111 connecting to 127.0.0.1:6379. Connection refused.")
        return real_first_sight(signer, stamp)

    monkeypatch.setattr(trust, "first_sight", redis_restarting_once)
    batch = event_batch(operation, (1, "state", {"state": "running"}), (2, "log", {"line": "a"}))
    result = ingest_events.apply(args=[seal_for_panel(INGEST_EVENTS, "n1", batch)])

    assert result.get() == 2  # stored by the retry (run at once here; after a back-off in a worker)
    assert checks == ["n1", "n1"]
    assert list(operation.events.values_list("seq", flat=True)) == [1, 2]


def test_a_batch_redelivered_after_a_worker_died_mid_task_is_stored_not_refused_as_a_replay(operation):
    """The killed worker had recorded the batch's nonce but not its events; the broker's redelivery (its
    `redelivered` flag, which no sender sets) is taken, a new publish of the same batch is not."""
    from panel.nodes.agents import trust
    from panel.operations.tasks import ingest_events
    from workers.identity import seal_for_panel, use_keys
    from workers.task_names import INGEST_EVENTS

    use_keys({"n1": trust.agent_key(operation.node)})
    batch = event_batch(operation, (1, "state", {"state": "running"}), (2, "log", {"line": "a"}))
    envelope = seal_for_panel(INGEST_EVENTS, "n1", batch)
    trust.open_envelope(
        "event_batch", INGEST_EVENTS, envelope
    )  # the dead worker's first sight, nothing stored

    assert ingest_events.apply(args=[envelope]).get() == 0  # published again: a replay
    ingest_events.push_request(delivery_info={"redelivered": True})  # as a worker's request carries it
    try:
        assert ingest_events(envelope) == 2
    finally:
        ingest_events.pop_request()
    assert list(operation.events.values_list("seq", flat=True)) == [1, 2]
