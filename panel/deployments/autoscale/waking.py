"""A scale-up that finds engines of the deployment asleep wakes them before it places new ones (issue 36).

A sleeping engine holds its NPUs and, at level 1, its weights in host memory: its wake takes seconds (vLLM
measured 18-200x faster than a cold start), where a new replica is planned, launched, loads its weights and
warms up. So the leader's up step of n engines wakes up to n sleepers (the lowest rows first: the primary
before its replicas), each a `wake` decision by the leader whose reason carries the step's own reason and
says which engine it woke instead of a cold start, with the figures the step was taken on, the engine's
last wake time and the deployment's last cold start where they are known. Only what the sleepers cannot
cover (fewer of them than the step asks, or one that has no room to wake or fails) goes on to a cold
replica through the apply path, as a step without sleepers does.

The wake runs in the leader's tick and waits for vLLM's /is_sleeping (panel/deployments/sleeping.py, its
timeout PANEL_WAKE_TIMEOUT_S): a level-1 wake takes a few seconds, and the next step waits for figures taken
with the new count anyway.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from django.utils.translation import gettext_noop

from panel.core.domain.choices import DecisionActor, DecisionKind, OperationKind, OperationStatus
from panel.deployments import reasons, sleep_state, sleeping
from panel.deployments.autoscale.policy import UP, Decision
from panel.deployments.conflicts import DeploymentConflict
from panel.deployments.decision_models import Decision as Recorded
from panel.deployments.models import Deployment
from panel.operations.models import Operation

log = logging.getLogger(__name__)

WAKE_INSTEAD = gettext_noop("waking {replica} instead of a cold start")


def wake_first(primary: Deployment, decision: Decision, asleep: list[Deployment], cold: Callable) -> str:
    """Wake sleepers for the up step `decision` (in serving engines), then `cold(decision)` with what is left
    in rows; "woke" when the sleepers covered it."""
    wanted = decision.to - decision.current
    woken = 0
    cold_start_s = last_cold_start_s(primary)
    for row in sorted(asleep, key=lambda row: row.pk)[:wanted]:
        figures = {
            **decision.figures,
            "level": sleep_state.asleep_level(row.pk),
            "last_wake_s": _last_wake_s(row),
            "cold_start_s": cold_start_s,
        }
        why = [*decision.reason, reasons.part("—"), reasons.part(WAKE_INSTEAD, replica=row.name)]
        try:
            sleeping.wake(row, reason=why, actor=DecisionActor.LEADER, figures=_known(figures))
        except DeploymentConflict as conflict:  # recorded as wake_failed by the wake itself
            log.info("autoscale of %s: %s", primary.name, conflict)
            continue
        woken += 1
    left = wanted - woken
    if left <= 0:
        return "woke"
    rows = primary.replicas_wanted
    step = {**decision.figures, "from": rows, "to": rows + left}
    return cold(Decision(UP, rows, rows + left, step, decision.reason))


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
