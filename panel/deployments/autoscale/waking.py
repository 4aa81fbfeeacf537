"""A scale-up that finds engines of the deployment asleep wakes them before it places new ones (issue 36).

A sleeping engine holds its NPUs and, at level 1, its weights in host memory: its wake takes seconds (vLLM
measured 18-200x faster than a cold start), where a new replica is planned, launched, loads its weights and
warms up. So the leader's up step of n engines wakes up to n sleepers (the lowest rows first: the primary
before its replicas), each a `wake` decision by the leader whose reason carries the step's own reason and
says which engine it woke instead of a cold start, with the figures the step was taken on, the engine's
last wake time and the deployment's last cold start where they are known. Only what the sleepers cannot
cover (fewer of them than the step asks, or one that has no room to wake or fails) goes on to a cold
replica through the apply path, as a step without sleepers does.

The wake runs beside the tick, not in it: the step checks the room (a level-2 sleeper whose HBM another
deployment took is not woken, and a cold replica covers it), takes the engine's waking lock (the one the
gateway's requests wait on, panel/deployments/sleep_state.py: a request that comes meanwhile waits for this
wake, not a second one) and queues `wake_for_scale` on the panel queue; the tick goes on to the other
deployments. The task wakes the engine and waits for vLLM's /is_sleeping (panel/deployments/sleeping.py,
its timeout PANEL_WAKE_TIMEOUT_S); the decider defers this deployment's next step while the lock is held.
A wake that fails is recorded (`wake_failed`), answers the requests that waited, and restarts the engine as
the gateway's failed wake does: it comes up awake after a cold start. A sleeper whose wake another process
already runs counts as woken.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from django.utils.translation import gettext_noop

from panel.core.domain.choices import DecisionActor, DecisionKind, OperationKind, OperationStatus
from panel.core.infra.panel_tasks import panel_task
from panel.deployments import reasons, sleep_state, sleeping
from panel.deployments.autoscale.policy import UP, Decision
from panel.deployments.conflicts import DeploymentConflict
from panel.deployments.decision_models import Decision as Recorded
from panel.deployments.models import Deployment
from panel.deployments.placement import hbm
from panel.operations.models import Operation

log = logging.getLogger(__name__)

WAKE_INSTEAD = gettext_noop("waking {replica} instead of a cold start")
WAKE_FOR_SCALE = "panel.deployments.wake_for_scale"
LOCK_MARGIN_S = 5.0  # the lock outlives the wake's own timeout a little, as the gateway's does


def wake_first(primary: Deployment, decision: Decision, asleep: list[Deployment], cold: Callable) -> str:
    """Start waking sleepers for the up step `decision` (in serving engines), then `cold(decision)` with what
    is left in rows; "waking" when the sleepers cover it. Returns at once: each wake runs in a task."""
    wanted = decision.to - decision.current
    woken = 0
    cold_start_s = last_cold_start_s(primary)
    for row in sorted(asleep, key=lambda row: row.pk):
        if woken >= wanted:
            break
        if sleeping.no_room(row, actor=DecisionActor.LEADER) is not None:  # recorded once by no_room
            continue
        token = sleep_state.claim_wake(row.pk, sleeping.wake_timeout_s() + LOCK_MARGIN_S)
        if token is None:  # a request's wake runs already: it serves the step as well
            woken += 1
            continue
        figures = {
            **decision.figures,
            "level": sleep_state.asleep_level(row.pk),
            "last_wake_s": _last_wake_s(row),
            "cold_start_s": cold_start_s,
        }
        why = [*decision.reason, reasons.part("—"), reasons.part(WAKE_INSTEAD, replica=row.name)]
        try:
            wake_for_scale.delay(row.pk, token, why, _known(figures))
        except Exception:  # a broker that does not take it: a cold replica covers this one
            log.exception("wake of %s not queued", row.name)
            sleep_state.release_wake(row.pk, token)
            continue
        woken += 1
    left = wanted - woken
    if left <= 0:
        return "waking"
    rows = decision.current + len(asleep)  # the group's rows: serving ones and sleepers
    step = {**decision.figures, "from": rows, "to": rows + left}
    return cold(Decision(UP, rows, rows + left, step, decision.reason))


@panel_task(WAKE_FOR_SCALE, ignore_result=True)
def wake_for_scale(deployment_id: int, token: str, reason: list[dict], figures: dict) -> str:
    """The leader's wake of one sleeper, beside its tick: "woke", "failed" (recorded, the requests that
    waited answered, the engine restarted) or "gone"; the waking lock `token` is released either way."""
    try:
        row = Deployment.objects.filter(pk=deployment_id).first()
        if row is None:
            return "gone"
        try:
            sleeping.wake(row, reason=reason, actor=DecisionActor.LEADER, figures=figures)
        except DeploymentConflict as conflict:  # recorded as wake_failed by the wake itself
            log.info("wake of %s for a scale-up: %s", row.name, conflict)
            if sleep_state.asleep_level(row.pk) is not None and hbm.wake_room(row) is None:
                sleeping.restart_unwoken(row)  # forgets its sleep state: the error is written after
                sleep_state.failed_wake(row.pk, str(conflict))
            return "failed"
        return "woke"
    finally:
        sleep_state.release_wake(deployment_id, token)


def _known(figures: dict) -> dict:
    return {key: value for key, value in figures.items() if value is not None}


def _last_wake_s(row: Deployment) -> float | None:
    primary = row.replica_of or row
    found = (
        Recorded.objects.filter(
            deployment=primary,
            replica="" if primary.pk == row.pk else row.name,
            kind=DecisionKind.WAKE,
        )
        .order_by("-time", "-id")
        .first()
    )
    value = (found.figures or {}).get("wake_s") if found is not None else None
    return value if isinstance(value, int | float) else None


def last_cold_start_s(primary: Deployment) -> float | None:
    """Seconds the deployment's newest finished launch took, from its operation (queued to done)."""
    names = [primary.name, *primary.replicas.values_list("name", flat=True)]
    launch = (
        Operation.objects.filter(target__in=names, kind=OperationKind.DEPLOY)
        .filter(status=OperationStatus.SUCCEEDED)
        .exclude(finished=None)
        .order_by("-finished")
        .first()
    )
    if launch is None:
        return None
    return round((launch.finished - launch.created).total_seconds(), 1)
