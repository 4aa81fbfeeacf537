"""The autoscaler's step in the reconcile tick (panel/deployments/autoscale/decider.py) on the database and
Redis: figures are stored as the probes store them (metrics_history.record), launches and stops are finished
the way the ingest finishes them, and the step is given the time, so each window is played, not waited for.
A scale-up goes through the apply path (a replica planned on free NPUs), one that cannot be placed is
refused once, a change under way defers the step, and a scale-down deletes the highest replica."""

from datetime import timedelta

import pytest
from django.utils import timezone

from tests.integration.test_deployment_apply import client, npu_node, pending, put, spec, tiny
from tests.integration.test_deployment_replicas import rows, settle

pytestmark = pytest.mark.django_db

__all__ = ["client", "npu_node", "tiny"]  # fixtures used by name

SCALE = {"min": 1, "max": 4, "target": {"waiting_per_replica": 2}, "up_after_s": 10, "down_after_s": 20}
BUSY = {"waiting": 6, "running": 8}
QUIET = {"waiting": 0, "running": 0}


@pytest.fixture(autouse=True)
def empty_history(_wired_to_redis):
    from panel.deployments import metrics_history

    for name in ("chat", "chat-r2", "chat-r3", "chat-r4"):
        metrics_history.forget(name)


def one_npu(**overrides):
    return spec(placement={"node": "npu-a", "npus": 1}, **overrides)


def probes(start, seconds: int, figures: dict, names=("chat",)):
    """What the probes would have stored every 2 s from `start` for `seconds`; the time after them."""
    from panel.deployments import metrics_history

    for offset in range(0, seconds + 1, 2):
        for name in names:
            metrics_history.record(name, figures, start + timedelta(seconds=offset))
    return start + timedelta(seconds=seconds)


def step(now):
    from panel.deployments.autoscale.decider import step_all

    return step_all(now)["chat"]


def decisions():
    from panel.deployments.decision_models import Decision

    return [
        (row.kind, row.outcome, row.figures.get("from"), row.figures.get("to"))
        for row in Decision.objects.filter(deployment_name="chat", kind__startswith="scale_").order_by(
            "time", "pk"
        )
    ]


def test_a_busy_window_adds_a_replica_through_apply_and_the_decision_settles_once_it_serves(client, tiny):
    assert put(client, "chat", one_npu(autoscale=SCALE)).status_code == 201
    settle()
    start = timezone.now() + timedelta(seconds=30)  # past the cooldown of the apply that created it
    now = probes(start, 6, BUSY)
    assert step(now) == "hold"  # 6 s of a 10 s window
    now = probes(now, 6, BUSY)
    assert step(now) == "up"
    assert [op.target for op in pending("deploy")] == ["chat-r2"]
    assert decisions() == [("scale_up", "pending", 1, 2)]
    from panel.deployments.decision_models import Decision

    assert Decision.objects.get(kind="scale_up").reason == "waiting 6.0/replica > 2.0 for 10 s: 1 → 2"
    assert step(now) == "deferred"  # still busy, but chat-r2 is still starting: no second step yet
    settle()
    step(now + timedelta(seconds=1))
    assert decisions() == [("scale_up", "done", 1, 2)]
    revision = client.get("/api/v1/deployments/chat/?format=spec").json()
    assert (revision["replicas"], revision["autoscale"]) == (2, SCALE)


def test_a_scale_up_with_no_free_npus_is_refused_once_with_the_planners_reason(client, tiny):
    assert put(client, "chat", one_npu(autoscale=SCALE)).status_code == 201
    assert put(client, "other", one_npu(replicas=3)).status_code == 201  # the other three NPUs
    settle()
    now = probes(timezone.now() + timedelta(seconds=30), 12, BUSY)
    assert step(now) == "refused"
    assert step(now + timedelta(seconds=2)) == "refused"
    assert decisions() == [("scale_refused", "failed", 1, 2)]
    from panel.deployments.decision_models import Decision

    reason = Decision.objects.get(kind="scale_refused").reason
    assert reason.startswith("waiting 6.0/replica > 2.0 for 10 s: 1 → 2 — Replica 2 does not fit")
    assert sorted(rows("chat")) == ["chat"]


def test_a_change_under_way_defers_the_step(client, tiny):
    assert put(client, "chat", one_npu(autoscale=SCALE)).status_code == 201
    settle()
    rolling = put(client, "chat", one_npu(autoscale=SCALE, engine={"max_model_len": 4096}))
    assert rolling.json()["effect"] == "rolling"
    now = probes(timezone.now() + timedelta(seconds=30), 12, BUSY)
    assert step(now) == "deferred"
    assert decisions() == []


def test_a_quiet_window_removes_the_highest_replica_and_min_bounds_it(client, tiny):
    assert put(client, "chat", one_npu(replicas=2, autoscale=SCALE)).status_code == 201
    settle()
    names = ("chat", "chat-r2")
    now = probes(timezone.now() + timedelta(seconds=30), 12, QUIET, names)
    assert step(now) == "hold"  # 12 s of a 20 s window
    now = probes(now, 10, QUIET, names)
    assert step(now) == "down"
    assert [op.target for op in pending("stop")] == ["chat-r2"]
    settle()
    assert sorted(rows("chat")) == ["chat"]
    now = probes(now + timedelta(seconds=30), 22, QUIET)
    assert step(now) == "hold"  # at min
    assert decisions() == [("scale_down", "done", 2, 1)]
