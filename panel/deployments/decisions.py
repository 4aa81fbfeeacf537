"""Recorded serving decisions (docs/serving-plane.md §2): every decision about a deployment's serving — the
leader's (autoscale, sleep, failover, restarts), the gateway's (a retry, a wake it asked for) or a person's
(scale, restart, stop) — is one `Decision` row written in the transaction of the change it records, then
settled with its outcome.

    decision = decisions.record(deployment, DecisionKind.SCALE_UP, reason=parts, figures={"from": 2, "to": 3})
    ...
    decisions.settle(decision, DecisionOutcome.DONE)

After commit each record and settle goes to the deployment's websocket group as one `deployment.decision`
frame and out as monitoring's `deployment_event_recorded` (alerts may be raised from it). A decision that
cannot be carried out is recorded once, not every tick: compare with `last(deployment, kind, role)` first.
The gateway never writes rows from the request path: it calls `record_later`, a panel task."""

import logging
import math
from typing import Any

from django.contrib.auth import get_user_model
from django.db import transaction
from django.utils import timezone

from panel.core.domain.choices import DecisionActor, DecisionKind, DecisionOutcome
from panel.core.infra.panel_tasks import panel_task
from panel.deployments.decision_models import Decision
from panel.deployments.models import Deployment
from panel.deployments.reasons import as_parts, english
from panel.monitoring.signals import deployment_event_recorded
from panel.realtime.broadcast import broadcast, deployment_group

log = logging.getLogger(__name__)

RECORD_LATER = "panel.deployments.record_decision"
FRAME = "deployment.decision"
MAX_FIGURES = 32
ROLES = ("", "prefill", "decode")


class BadDecision(ValueError):
    """A decision its caller built wrong (a kind, role, actor, outcome or figure no decision has)."""


def record(
    deployment: Deployment,
    kind: str,
    *,
    reason: str | list[dict],
    figures: dict | None = None,
    role: str = "",
    actor: str = DecisionActor.LEADER,
    user=None,
    outcome: str = DecisionOutcome.PENDING,
) -> Decision:
    """Write one decision about `deployment` (a replica's goes on its primary, naming the replica); call it
    inside the transaction of the change it records. `reason`: English text or reason parts
    (panel/deployments/reasons.py); `figures`: the numbers it was decided on."""
    _check(kind, DecisionKind, "kind")
    _check(actor, DecisionActor, "actor")
    _check(outcome, DecisionOutcome, "outcome")
    if role not in ROLES:
        raise BadDecision(f"role {role!r} is none of {', '.join(map(repr, ROLES))}")
    primary = _primary(deployment)
    parts = as_parts(reason)
    now = timezone.now()
    if user is not None and not user.is_authenticated:
        user = None  # an anonymous request's user is nobody to name
    decision = Decision.objects.create(
        deployment=primary,
        deployment_name=primary.name,
        replica="" if primary.pk == deployment.pk else deployment.name,
        time=now,
        kind=kind,
        role=role,
        actor=actor,
        user=user,
        username=user.get_username() if user is not None else "",
        figures=checked_figures(figures or {}),
        reason=english(parts),
        reason_parts=parts,
        outcome=outcome,
        settled=None if outcome == DecisionOutcome.PENDING else now,
    )
    _notify_after_commit(decision, settled=outcome != DecisionOutcome.PENDING)
    return decision


def settle(decision: Decision, outcome: str, reason: str | list[dict] | None = None) -> None:
    """The decision was carried out (`done`) or could not be (`failed`, with why); inside the transaction
    of what settled it, like `record`."""
    _check(outcome, DecisionOutcome, "outcome")
    if outcome == DecisionOutcome.PENDING:
        raise BadDecision("a decision is settled as done or failed, not pending")
    decision.outcome = outcome
    decision.outcome_parts = as_parts(reason) if reason else []
    decision.settled = timezone.now()
    decision.save(update_fields=["outcome", "outcome_parts", "settled"])
    _notify_after_commit(decision, settled=True)


def settle_pending(
    deployment: Deployment, kind: str, outcome: str, reason: str | list[dict] | None = None
) -> int:
    """Settle every pending decision of `kind` about this engine row (the primary's own, or one replica's):
    what a start that reached running or a stop that ended does for the restart or stop that asked for it.
    How many it settled."""
    primary = _primary(deployment)
    replica = "" if primary.pk == deployment.pk else deployment.name
    pending = Decision.objects.filter(
        deployment=primary, replica=replica, kind=kind, outcome=DecisionOutcome.PENDING
    ).order_by("time", "id")
    settled = 0
    for decision in pending:
        settle(decision, outcome, reason)
        settled += 1
    return settled


def last(deployment: Deployment, kind: str, role: str = "") -> Decision | None:
    """The deployment's latest decision of `kind` for `role` (what the leader compares with before it
    records the same refusal again)."""
    primary = _primary(deployment)
    return Decision.objects.filter(deployment=primary, kind=kind, role=role).order_by("-time", "-id").first()


def record_later(
    deployment_id: int,
    kind: str,
    *,
    reason: str | list[dict],
    figures: dict | None = None,
    role: str = "",
    actor: str = DecisionActor.GATEWAY,
    user=None,
    outcome: str = DecisionOutcome.PENDING,
) -> bool:
    """`record`, by the panel worker: what the gateway calls from a request's path (it never writes rows
    there). The arguments are checked here, so a wrong call fails in its caller's tests; a broker that does
    not take the message is logged, never raised (the request goes on). Whether it was queued."""
    _check(kind, DecisionKind, "kind")
    _check(actor, DecisionActor, "actor")
    _check(outcome, DecisionOutcome, "outcome")
    if role not in ROLES:
        raise BadDecision(f"role {role!r} is none of {', '.join(map(repr, ROLES))}")
    kwargs = {
        "reason": as_parts(reason),
        "figures": checked_figures(figures or {}),
        "role": role,
        "actor": actor,
        "user_id": user.pk if user is not None else None,
        "outcome": outcome,
    }
    try:
        record_decision.delay(int(deployment_id), str(kind), **kwargs)
    except Exception:
        log.exception("decision %s of deployment %s not queued", kind, deployment_id)
        return False
    return True


@panel_task(RECORD_LATER, ignore_result=True)
def record_decision(deployment_id: int, kind: str, **kwargs: Any) -> int | None:
    """`record_later`'s work on the panel worker: the decision's id, or None when the deployment is gone."""
    user_id = kwargs.pop("user_id", None)
    user = get_user_model().objects.filter(pk=user_id).first() if user_id is not None else None
    with transaction.atomic():
        deployment = Deployment.objects.filter(pk=deployment_id).first()
        if deployment is None:
            log.info("decision %s not recorded: deployment %s is gone", kind, deployment_id)
            return None
        return record(deployment, kind, user=user, **kwargs).pk


def as_data(decision: Decision) -> dict:
    """The decision as the API, the websocket frame and the domain event carry it (English reasons; the
    pages and the API's `reason_display` translate the parts)."""
    return {
        "id": decision.pk,
        "name": decision.deployment_name,
        "replica": decision.replica,
        "time": decision.time.isoformat(),
        "kind": decision.kind,
        "role": decision.role,
        "actor": decision.actor,
        "username": decision.username,
        "figures": decision.figures,
        "reason": decision.reason,
        "reason_parts": decision.reason_parts,
        "outcome": decision.outcome,
        "outcome_reason": english(decision.outcome_parts),
        "outcome_parts": decision.outcome_parts,
        "settled": decision.settled.isoformat() if decision.settled else None,
    }


def checked_figures(figures: dict) -> dict:
    """Figures are a small JSON object of finite numbers (a decision's figures are what it was decided on,
    never free text)."""
    if not isinstance(figures, dict):
        raise BadDecision("figures are a JSON object of numbers")
    if len(figures) > MAX_FIGURES:
        raise BadDecision(f"at most {MAX_FIGURES} figures")
    for key, value in figures.items():
        if not isinstance(key, str) or not key or len(key) > 64:
            raise BadDecision(f"figure name {key!r}: a name of 1 to 64 characters")
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            raise BadDecision(f"figure {key!r} is {value!r}: a finite number")
    return dict(figures)


def _check(value: str, choices, what: str) -> None:
    if value not in choices.values:
        raise BadDecision(f"{what} {value!r} is none of {', '.join(choices.values)}")


def _primary(deployment: Deployment) -> Deployment:
    if deployment.replica_of_id is None:
        return deployment
    return Deployment.objects.get(pk=deployment.replica_of_id)


def _notify_after_commit(decision: Decision, *, settled: bool) -> None:
    data = as_data(decision)  # as it is now: a later settle sends its own
    group = deployment_group(decision.deployment_name)

    def notify() -> None:
        broadcast(group, {"type": FRAME, "name": data["name"], "decision": data})
        # A listener's failure (an alert rule) must not undo or hide the decision: logged, not raised.
        for receiver, error in deployment_event_recorded.send_robust(
            sender=Decision, decision=data, settled=settled
        ):
            if isinstance(error, Exception):
                log.error("%s failed on decision %s", receiver, data["id"], exc_info=error)

    transaction.on_commit(notify)
