"""The autoscaler's step in the reconcile tick, on the beat leader only (docs/serving-plane.md §3).

For each running deployment with `autoscale:` it reads its replicas' figures (panel/deployments/
metrics_history.py, what the probes brought), asks the policy (policy.py) and, when that says up or down,
changes the count through the same path a person's Scale takes (panel/deployments/spec/scale.py: the current
spec with that count changed, applied with cause `autoscale`), under the deployment's change lock.

A disaggregated deployment is stepped per role that has its own `autoscale:` (a Group: that role's engines,
count and block), on that role's engines' figures alone, so prefill and decode scale independently: a role's
decisions carry the role (and say it first in their reason), its cooldown counts only the changes that
touched it (a person's, or its own steps), and a change under way defers it only when it is that role's
(a new engine of it not serving yet, one stopping) or a rolling update. So a
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
scale-up wakes such an engine before it places a new one (waking.py): seconds instead of a cold start. The
wake runs in a task of its own, so the tick goes on to the other deployments; this one's next step waits
for it (a wake under way is a change in flight).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext_noop

from panel.accounts.roles import OPERATOR, has_role
from panel.core.domain.choices import DecisionKind, DecisionOutcome, DeploymentState, DesiredState
from panel.core.domain.errors import InvalidInput, NotAllowed
from panel.deployments import decisions, metrics_history, reasons, services, sleep_state, sleeping
from panel.deployments.autoscale import waking
from panel.deployments.autoscale.config import CAUSE, Autoscale, block_of, blocks_of, capacity_of
from panel.deployments.autoscale.policy import HOLD, UP, Decision, decide
from panel.deployments.conflicts import DeploymentConflict
from panel.deployments.models import Deployment, Revision, Rollout
from panel.deployments.rollouts import replicas
from panel.deployments.spec.roles_spec import ROLES, role_rows
from panel.deployments.spec.scale import scale
from panel.deployments.spec.spec import idle_of
from panel.deployments.spec.spec_plan import flat_errors

log = logging.getLogger(__name__)

SCALES = (DecisionKind.SCALE_UP, DecisionKind.SCALE_DOWN)


@dataclass(frozen=True)
class Group:
    """The engines one `autoscale:` block counts: a plain deployment's replicas (role ""), or one role's."""

    role: str
    config: Autoscale
    rows: list[Deployment]  # not being deleted; the primary first where it is one of them
    wanted: int  # the count the spec wants: replicas_wanted, or roles_wanted[role]


def groups_of(primary: Deployment) -> list[Group]:
    blocks = blocks_of(primary)
    return [
        Group(role, _config(blocks[role]), _rows(primary, role), _count(primary, role))
        for role in ("", *ROLES)
        if role in blocks
    ]


def _rows(primary: Deployment, role: str) -> list[Deployment]:
    return role_rows(primary, role) if role else [primary, *replicas.members(primary)]


def _config(block: dict) -> Autoscale:
    config = Autoscale.from_spec(block)
    assert config is not None  # blocks_of keeps only the blocks a deployment has
    return config


def step_all(now: datetime | None = None) -> dict[str, str]:
    """One step for each running deployment with `autoscale:` (each role of one with roles, keyed
    `name:role`); {name: up|down|hold|refused|deferred|waking|asleep}."""
    now = now or timezone.now()
    done = {}
    primaries = Deployment.objects.filter(
        replica_of__isnull=True, autoscale__isnull=False, desired_state=DesiredState.RUNNING
    ).order_by("pk")
    for primary in primaries:
        for group in groups_of(primary):
            key = f"{primary.name}:{group.role}" if group.role else primary.name
            try:
                done[key] = step(primary, group, now)
            except Exception:  # one deployment's failure must not stop the others' steps (nor the tick)
                log.exception("autoscale step of %s failed", key)
                done[key] = "error"
    return done


def step(primary: Deployment, group: Group, now: datetime) -> str:
    config = group.config
    _settle_pending(primary, group)
    running = [row for row in group.rows if row.observed_state == DeploymentState.RUNNING]
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
        group.wanted - len(asleep),
        now.timestamp(),
        last_change=_last_change(primary, group.role, now, window),
        capacity=capacity_of((group.rows[0] if group.rows else primary).spec or {}),
        gap_s=gap_s(),
        asleep=len(asleep),
        role=group.role,
    )
    if decision.action == HOLD:
        return HOLD
    if _in_flight(primary, group):
        log.info("autoscale of %s deferred: a change under way (%s)", _label(primary, group), decision.action)
        return "deferred"
    if decision.to == 0:  # min 0: plain replicas only (a role keeps an engine, spec_field.py)
        return _to_zero(primary, decision, config, now)
    if decision.action == UP and asleep:
        return waking.wake_first(primary, decision, asleep, lambda more: _act(primary, group, more))
    return _act(primary, group, decision)


def _label(primary: Deployment, group: Group) -> str:
    return f"{primary.name} ({group.role})" if group.role else primary.name


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


def _in_flight(primary: Deployment, group: Group) -> bool:
    """A rollout, a start or stop, an engine of the group that does not serve yet, one still stopping after a
    scale-down or an engine being woken: the next step waits for figures taken with the count that is
    there. The other role's engines starting or stopping do not hold this role's step."""
    if primary.rollouts.filter(status=Rollout.RUNNING).exists():
        return True
    stopping = primary.replicas.filter(desired_state=DesiredState.DELETED, role=group.role)
    if len(group.rows) != group.wanted or stopping.exists():
        return True
    return any(
        row.observed_state != DeploymentState.RUNNING
        or services.active_operations(row).exists()
        or sleep_state.waking(row.pk)
        for row in group.rows
    )


def _last_change(primary: Deployment, role: str, now: datetime, window_s: float) -> float | None:
    """When the group last changed: any applied revision (an autoscale step, a person's edit), except, for a
    role, the autoscaler's steps of the other role. Revisions older than the window (and its cooldown) do
    not hold a step, so only those are read."""
    since = now - timedelta(seconds=window_s)
    recent = Revision.objects.filter(deployment=primary, created__gte=since).order_by("-number")
    for revision in recent.only("created", "cause", "changes"):
        if not role or revision.cause != CAUSE or any(line.get("role") == role for line in revision.changes):
            return revision.created.timestamp()
    return None


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


def _act(primary: Deployment, group: Group, decision: Decision) -> str:
    kind = DecisionKind.SCALE_UP if decision.action == UP else DecisionKind.SCALE_DOWN
    user = _acting_user(primary)
    if user is None:
        nobody = gettext_noop("no operator or admin is left to act for: apply the spec again to let it scale")
        return _refused(primary, group, decision, [reasons.part(nobody)])
    with transaction.atomic():
        locked = Deployment.objects.select_for_update().get(pk=primary.pk)
        if _count(locked, group.role) != decision.current or not block_of(locked, group.role):
            return "deferred"  # someone changed it since the figures were read
        try:
            with transaction.atomic():
                scale(locked, decision.to, group.role, user, cause=CAUSE)
        except DeploymentConflict as conflict:
            log.info("autoscale of %s deferred: %s", _label(primary, group), conflict)
            return "deferred"
        except (InvalidInput, NotAllowed) as error:
            why = [*decision.reason, reasons.part("—"), reasons.part(_text(error))]
            return _refused(primary, group, decision, why)
        decisions.record(locked, kind, reason=decision.reason, figures=decision.figures, role=group.role)
    return decision.action


def _count(primary: Deployment, role: str) -> int:
    return int((primary.roles_wanted or {}).get(role) or 0) if role else primary.replicas_wanted


def _refused(primary: Deployment, group: Group, decision: Decision, why: list[dict]) -> str:
    """`scale_refused` with why, once: not again while the group's last refusal (newer than any of its steps)
    said so."""
    role = group.role
    with transaction.atomic():
        last = decisions.last(primary, DecisionKind.SCALE_REFUSED, role)
        steps = [found for kind in SCALES if (found := decisions.last(primary, kind, role)) is not None]
        newer_step = any(last is None or step.time > last.time for step in steps)
        if last is not None and not newer_step and last.reason_parts == why:
            return "refused"
        figures = {key: value for key, value in decision.figures.items() if value is not None}
        decisions.record(
            primary, DecisionKind.SCALE_REFUSED, reason=why, figures=figures, role=role,
            outcome=DecisionOutcome.FAILED,
        )  # fmt: skip
    return "refused"


def _text(error: Exception) -> str:
    detail = getattr(error, "detail", None)
    return flat_errors(detail) if isinstance(detail, dict | list) else str(detail or error)


def _settle_pending(primary: Deployment, group: Group) -> None:
    """A step waits as pending until the count it asked for serves (done) or an engine of the group failed
    (failed)."""
    rows = group.rows
    for kind in SCALES:
        pending = decisions.last(primary, kind, group.role)
        if pending is None or pending.outcome != DecisionOutcome.PENDING:
            continue
        failed = [row.name for row in rows if row.observed_state == DeploymentState.FAILED]
        stopping = primary.replicas.filter(desired_state=DesiredState.DELETED, role=group.role).exists()
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
