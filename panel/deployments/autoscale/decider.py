"""The autoscaler's step in the reconcile tick, on the beat leader only (docs/serving-plane.md §3).

For each running deployment with `autoscale:` it reads its replicas' figures (panel/deployments/
metrics_history.py, what the probes brought), asks the policy (policy.py) and, when that says up or down,
changes the count through the same path a person's Scale takes: the current spec with `replicas` changed,
applied (panel/deployments/spec/apply.py, cause `autoscale`), under the deployment's change lock. So a
scale-up is planned on free NPUs like any replica (one that cannot be placed is refused, recorded once as
`scale_refused` with the planner's reason), and a scale-down deletes the highest replica, whose stop waits
for the gateway's requests in flight on it (rollouts/drain.py). A change already under way (a rollout, a
start or stop, a replica not serving yet) defers the step to a later tick.

Every step is a recorded decision (panel/deployments/decisions.py): `scale_up` / `scale_down` pending
until the count it asked for serves (done) or a new replica failed (failed).

With `min: 0` the step from one replica to zero puts the engine to sleep (panel/deployments/sleeping.py, a
`sleep` decision with the autoscaler's reason), once no request was routed to it for `down_after_s` either;
the first request wakes it through the gateway's hold. An engine asleep (by this step, the idle step or a
person) is left out of the figures: it serves nothing, and its zeros would hide the load on the others. A
scale-up wakes such an engine before it places a new one (waking.py): seconds instead of a cold start.
"""

from __future__ import annotations

import logging
from datetime import datetime

from django.conf import settings
from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext_noop
from rest_framework import serializers

from panel.accounts.roles import OPERATOR, has_role
from panel.core.domain.choices import DecisionKind, DecisionOutcome, DeploymentState, DesiredState
from panel.deployments import decisions, metrics_history, reasons, services, sleep_state, sleeping
from panel.deployments.autoscale import waking
from panel.deployments.autoscale.config import Autoscale, capacity_of
from panel.deployments.autoscale.policy import HOLD, UP, Decision, decide
from panel.deployments.conflicts import DeploymentConflict
from panel.deployments.launch.launch_tuning import AdminOnlyEnv
from panel.deployments.models import Deployment, Revision, Rollout
from panel.deployments.rollouts import replicas
from panel.deployments.spec.apply import Change, apply
from panel.deployments.spec.request import AdminOnlyFlag
from panel.deployments.spec.spec import idle_of, parse_spec, spec_of
from panel.deployments.spec.spec_plan import flat_errors

log = logging.getLogger(__name__)

CAUSE = "autoscale"
SCALES = (DecisionKind.SCALE_UP, DecisionKind.SCALE_DOWN)


def step_all(now: datetime | None = None) -> dict[str, str]:
    """One step for each running deployment with `autoscale:`; {name: up|down|hold|refused|deferred}."""
    now = now or timezone.now()
    done = {}
    primaries = Deployment.objects.filter(
        replica_of__isnull=True, autoscale__isnull=False, desired_state=DesiredState.RUNNING
    ).order_by("pk")
    for primary in primaries:
        try:
            done[primary.name] = step(primary, now)
        except Exception:  # one deployment's failure must not stop the others' steps (nor the tick)
            log.exception("autoscale step of %s failed", primary.name)
            done[primary.name] = "error"
    return done


def step(primary: Deployment, now: datetime) -> str:
    config = Autoscale.from_spec(primary.autoscale)
    if config is None:
        return HOLD
    rows = [primary, *replicas.members(primary)]
    _settle_pending(primary, rows)
    running = [row for row in rows if row.observed_state == DeploymentState.RUNNING]
    asleep = [row for row in running if sleep_state.asleep_level(row.pk) is not None]
    serving = [row for row in running if row not in asleep]
    window = max(config.up_after_s, config.down_after_s) + gap_s()
    series = {
        row.name: [(p["time"], p["metrics"]) for p in metrics_history.read(row.name, now, since_s=window)]
        for row in serving
    }
    decision = decide(
        config,
        series,
        primary.replicas_wanted - len(asleep),
        now.timestamp(),
        last_change=_last_change(primary),
        capacity=capacity_of(primary.spec or {}),
        gap_s=gap_s(),
        asleep=len(asleep),
    )
    if decision.action == HOLD:
        return HOLD
    if _in_flight(primary, rows):
        log.info("autoscale of %s deferred: a change is under way (%s)", primary.name, decision.action)
        return "deferred"
    if decision.to == 0:
        return _to_zero(primary, decision, config, now)
    if decision.action == UP and asleep:
        return waking.wake_first(primary, decision, asleep, lambda more: _act(primary, more))
    return _act(primary, decision)


def _to_zero(primary: Deployment, decision: Decision, config: Autoscale, now: datetime) -> str:
    """min 0: the last engine sleeps (it is not stopped), unless the gateway routed a request to it within
    the down window: a short request can start and end between two probes."""
    last = sleep_state.last_request(primary.pk)
    if last is not None and now.timestamp() - last < config.down_after_s:
        return HOLD
    level = (idle_of(primary) or {}).get("level")
    try:
        slept = sleeping.sleep(primary, level=level, reason=decision.reason, figures=decision.figures)
    except DeploymentConflict as conflict:
        log.info("autoscale of %s to zero deferred: %s", primary.name, conflict)
        return "deferred"
    return "asleep" if slept else "refused"


def gap_s() -> float:
    """The longest a replica's figures may be silent before they count as missing: a few probe intervals."""
    return max(10.0, 5 * settings.PANEL_DEPLOY_RECONCILE_S)


def _in_flight(primary: Deployment, rows: list[Deployment]) -> bool:
    """A rollout, a start or stop, a replica that does not serve yet or one still stopping after a scale-down:
    the next step waits for figures taken with the count that is there."""
    if primary.rollouts.filter(status=Rollout.RUNNING).exists():
        return True
    if (
        len(rows) != primary.replicas_wanted
        or primary.replicas.filter(desired_state=DesiredState.DELETED).exists()
    ):
        return True
    return any(
        row.observed_state != DeploymentState.RUNNING or services.active_operations(row).exists()
        for row in rows
    )


def _last_change(primary: Deployment) -> float | None:
    """When the deployment last changed (any applied revision: an autoscale step, a person's edit)."""
    newest = Revision.objects.filter(deployment=primary).order_by("-number").values_list("created", flat=True)
    when = newest.first()
    return when.timestamp() if when is not None else None


def _acting_user(primary: Deployment):
    """Who the step acts for: the person who last changed the deployment (who set autoscale, typically),
    while they may still operate it."""
    for revision in (
        Revision.objects.filter(deployment=primary).exclude(cause=CAUSE).select_related("created_by")
    ):
        user = revision.created_by
        if user is not None and user.is_active and has_role(user, OPERATOR):
            return user
    if (
        primary.created_by is not None
        and primary.created_by.is_active
        and has_role(primary.created_by, OPERATOR)
    ):
        return primary.created_by
    return None


def _act(primary: Deployment, decision: Decision) -> str:
    kind = DecisionKind.SCALE_UP if decision.action == UP else DecisionKind.SCALE_DOWN
    user = _acting_user(primary)
    if user is None:
        why = gettext_noop("no operator or admin is left to act for: apply the spec again to let it scale")
        return _refused(primary, decision, [reasons.part(why)])
    spec = parse_spec(spec_of(primary), primary.name)
    spec["replicas"] = decision.to
    with transaction.atomic():
        locked = Deployment.objects.select_for_update().get(pk=primary.pk)
        if locked.replicas_wanted != decision.current or not locked.autoscale:
            return "deferred"  # someone changed it since the figures were read
        try:
            with transaction.atomic():
                apply(primary.name, spec, user, change=Change(cause=CAUSE))
        except DeploymentConflict as conflict:
            log.info("autoscale of %s deferred: %s", primary.name, conflict)
            return "deferred"
        except (serializers.ValidationError, AdminOnlyFlag, AdminOnlyEnv) as error:
            return _refused(
                primary, decision, [*decision.reason, reasons.part("—"), reasons.part(_text(error))]
            )
        decisions.record(locked, kind, reason=decision.reason, figures=decision.figures)
    return decision.action


def _refused(primary: Deployment, decision: Decision, why: list[dict]) -> str:
    """`scale_refused` with why, once: not again while the last refusal (newer than any step) said so."""
    with transaction.atomic():
        last = decisions.last(primary, DecisionKind.SCALE_REFUSED)
        steps = [found for kind in SCALES if (found := decisions.last(primary, kind)) is not None]
        newer_step = any(last is None or step.time > last.time for step in steps)
        if last is not None and not newer_step and last.reason_parts == why:
            return "refused"
        figures = {key: value for key, value in decision.figures.items() if value is not None}
        decisions.record(
            primary, DecisionKind.SCALE_REFUSED, reason=why, figures=figures, outcome=DecisionOutcome.FAILED
        )
    return "refused"


def _text(error: Exception) -> str:
    detail = getattr(error, "detail", None)
    return flat_errors(detail) if isinstance(detail, dict | list) else str(detail or error)


def _settle_pending(primary: Deployment, rows: list[Deployment]) -> None:
    """A step waits as pending until the count it asked for serves (done) or a replica failed (failed)."""
    for kind in SCALES:
        pending = decisions.last(primary, kind)
        if pending is None or pending.outcome != DecisionOutcome.PENDING:
            continue
        failed = [row.name for row in rows if row.observed_state == DeploymentState.FAILED]
        stopping = primary.replicas.filter(desired_state=DesiredState.DELETED).exists()
        with transaction.atomic():
            if failed:
                why = gettext_noop("{names} failed to start")
                decisions.settle(
                    pending, DecisionOutcome.FAILED, [reasons.part(why, names=", ".join(failed))]
                )
            elif (
                len(rows) == pending.figures.get("to")
                and not stopping
                and all(row.observed_state == DeploymentState.RUNNING for row in rows)
            ):
                decisions.settle(pending, DecisionOutcome.DONE)
