"""Stopping what the gateway routes to waits for its requests in flight (deployments.rollouts.drain): stop,
delete, scaling down and a rolling update each leave the pool at once, send the engine's stop only when the
gateway counts no request on it, or when the grace period ran out. Agents are not involved: launches and
stops are finished the way the ingest finishes them and the reconcile tick is called by hand; the in-flight
counts are the gateway's own Redis sets."""

import time
from datetime import timedelta

import pytest

from tests.integration.test_deployment_apply import client, npu_node, pending, put, spec, tiny
from tests.integration.test_deployment_replicas import advance, one_npu, rows, settle

pytestmark = pytest.mark.django_db

__all__ = ["client", "npu_node", "tiny"]  # fixtures used by name


@pytest.fixture(autouse=True)
def gateway_counts(_wired_to_redis):
    """The in-flight sets of this test's instances, empty before and after."""
    from panel.gateway import store

    def clear():
        stale = [
            *store.client().scan_iter(f"{store.inflight_key('')}*"),
            *store.client().scan_iter(f"{store.picked_key('')}*"),
        ]
        if stale:
            store.client().delete(*stale)

    clear()
    yield
    clear()


def in_flight(instance: str, request_id: str = "req-1") -> None:
    from panel.gateway import store

    store.client().zadd(store.inflight_key(instance), {request_id: time.time()})


def finished(instance: str, request_id: str = "req-1") -> None:
    from panel.gateway import store

    store.client().zrem(store.inflight_key(instance), request_id)


def stops_for(name: str) -> list:
    return [op for op in pending("stop") if op.target == name]


def tick():
    from panel.deployments.rollouts.reconcile import tick as reconcile_tick

    return reconcile_tick()


def test_a_stop_waits_for_the_requests_in_flight_and_the_pool_drops_it_at_once(client, tiny):
    from panel.deployments.models import Deployment
    from panel.gateway.instances.pool import pool_for

    put(client, "chat", spec())
    settle()
    assert [i.id for i in pool_for("chat").instances] == ["chat/0"]
    in_flight("chat/0")

    assert client.post("/api/v1/deployments/chat/stop/").status_code == 202
    row = Deployment.objects.get(name="chat")
    assert row.observed_state == "stopping"
    assert row.drain_until is not None
    assert "Draining: the requests in flight through the gateway finish first" in row.reason
    assert stops_for("chat") == []  # the engine still answers the stream it serves
    assert pool_for("chat") is None  # but takes no new request

    tick()
    assert stops_for("chat") == []
    finished("chat/0")
    tick()
    assert len(stops_for("chat")) == 1
    assert Deployment.objects.get(name="chat").drain_until is None
    settle()
    assert Deployment.objects.get(name="chat").observed_state == "stopped"


def test_the_grace_period_ends_a_drain_that_does_not(client, tiny):
    from panel.deployments.models import Deployment

    put(client, "chat", spec())
    settle()
    in_flight("chat/0")
    assert client.delete("/api/v1/deployments/chat/").status_code == 202
    tick()
    assert stops_for("chat") == []
    Deployment.objects.filter(name="chat").update(
        drain_until=Deployment.objects.get().drain_until - timedelta(hours=1)
    )
    tick()
    assert len(stops_for("chat")) == 1
    settle()
    assert not Deployment.objects.filter(name="chat").exists()


def test_a_stop_also_waits_while_web_processes_may_still_route_by_an_older_pool(client, tiny):
    """No request in flight, but one was sent a moment ago: a web process may hold a pool copy read just
    before the stop, so the engine keeps answering until no process has picked it for a few seconds."""
    from panel.gateway import store

    put(client, "chat", spec())
    settle()
    store.client().set(store.picked_key("chat/0"), "1", ex=30)
    assert client.post("/api/v1/deployments/chat/stop/").status_code == 202
    tick()
    assert stops_for("chat") == []
    store.client().delete(store.picked_key("chat/0"))  # what the flag's expiry does a few seconds later
    tick()
    assert len(stops_for("chat")) == 1


def test_nothing_in_flight_stops_at_once(client, tiny):
    put(client, "chat", spec())
    settle()
    in_flight("other/0")  # another deployment's request is not this one's
    assert client.post("/api/v1/deployments/chat/stop/").status_code == 202
    assert len(stops_for("chat")) == 1


def test_scaling_down_drains_the_replicas_it_removes(client, tiny):
    put(client, "chat", one_npu(replicas=3))
    settle()
    in_flight("chat-r3/0")
    answer = put(client, "chat", one_npu(replicas=1))
    assert answer.json()["effect"] == "scale", answer.json()
    assert len(stops_for("chat-r2")) == 1
    assert stops_for("chat-r3") == []
    finished("chat-r3/0")
    tick()
    settle()
    assert sorted(rows("chat")) == ["chat"]


def test_a_rolling_update_restarts_a_replica_only_once_its_streams_ended(client, tiny):
    from panel.deployments.models import Deployment

    put(client, "chat", one_npu(replicas=2))
    settle()
    in_flight("chat/0")
    answer = put(client, "chat", one_npu(replicas=2, engine={"max_model_len": 4096}))
    assert answer.json()["rollout"]["surge"] == "chat-r3"
    settle()  # the surge runs
    rollout = advance()
    assert (rollout.phase, rollout.current) == ("replace", "chat")
    # chat restarts in place: out of the pool at once, its engine stopped only after its stream.
    assert Deployment.objects.get(name="chat").observed_state == "stopping"
    assert stops_for("chat") == []
    advance()
    assert stops_for("chat") == []
    finished("chat/0")
    advance()
    assert len(stops_for("chat")) == 1
    for _round in range(12):
        settle()
        rollout = advance()
        if rollout.status != "running":
            break
    assert rollout.status == "succeeded", rollout.message
    assert {row.spec["max_model_len"] for row in rows("chat").values()} == {4096}


def test_a_deployment_deleted_while_a_pass_runs_is_skipped(client, tiny, monkeypatch):
    """A rollout's old replica or a finished delete can go between the pass's list and its row lock."""
    from types import SimpleNamespace

    from panel.deployments.models import Deployment
    from panel.deployments.rollouts import reconcile

    put(client, "chat", one_npu(replicas=2))
    settle()
    listed = reconcile.Deployment.objects.exclude

    def list_then_delete_one(*args, **kwargs):
        rows = list(listed(*args, **kwargs).order_by("pk"))
        Deployment.objects.filter(name="chat").delete()
        return SimpleNamespace(order_by=lambda *_fields: rows)

    monkeypatch.setattr(reconcile.Deployment.objects, "exclude", list_then_delete_one)
    tick()  # before the fix: Deployment.DoesNotExist, and the beat's pass ended there
    assert sorted(Deployment.objects.values_list("name", flat=True)) == ["chat-r2"]
