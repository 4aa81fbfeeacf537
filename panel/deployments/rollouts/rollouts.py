"""Rolling updates: a changed spec goes over a deployment's replicas one at a time.

Apply records a `Rollout` (the spec as applied, the stale replicas in order) and the reconcile tick calls
`advance_all()`, which moves each running rollout on as far as what it observes allows. For each stale
replica:

1. surge: when free NPUs allow, an extra replica (`<name>-r<k>`, k above every index) starts with the new
   launch; the rollout waits until it runs (the agent's launch waits for the engine's first real request),
   so the gateway pools it before anything old goes away;
2. replace: the stale replica takes the new plan and restarts in place; wait until it runs again;
3. cleanup: the surge is deleted (stop, release NPUs); wait until its row is gone.

With no free NPUs for a surge the replica is replaced in place and the message says so. A new replica that
fails (observed failed or unhealthy, or a failed launch) stops the rollout: the surge is removed, a replica
that failed with the new launch goes back to the launch it had (kept in `Rollout.previous` when it took the
new plan) and starts again, the other replicas keep serving, and the message says why. Terminal states are
final.
"""

from __future__ import annotations

import logging
from typing import Any

from django.db import transaction
from django.utils.translation import gettext as _
from django.utils.translation import gettext_noop

from panel.core.domain.choices import (
    DecisionActor,
    DecisionKind,
    DecisionOutcome,
    DeploymentState,
    DesiredState,
)
from panel.core.domain.errors import InvalidInput, NotAllowed
from panel.core.domain.translated import in_language
from panel.deployments import alerting, decisions, reasons, services
from panel.deployments.models import Deployment, Rollout
from panel.deployments.reasons import part, spelled
from panel.deployments.rollouts import replicas
from panel.deployments.spec import role_members, spec_model
from panel.deployments.spec.roles_spec import role_member_name
from panel.deployments.spec.spec_plan import flat_errors, plan_member
from panel.nodes.models import Npu

log = logging.getLogger(__name__)

SURGE, REPLACE, CLEANUP, DONE = "surge", "replace", "cleanup", "done"
BROKEN = (DeploymentState.FAILED, DeploymentState.UNHEALTHY)


def begin(primary: Deployment, spec: dict[str, Any], stale: list[str], user) -> Rollout:
    """Record the rollout and take its first step at once (the surge starts with the apply)."""
    rollout = Rollout.objects.create(
        deployment=primary,
        spec=dict(spec),
        todo=stale,
        total=len(stale),
        created_by=user if user is not None and user.is_authenticated else None,
    )
    # A rolling update of one role's engines (a disaggregated deployment's) is recorded with that role.
    roles = set(Deployment.objects.filter(name__in=stale).values_list("role", flat=True))
    decisions.record(
        primary,
        DecisionKind.ROLLOUT,
        reason=[part(gettext_noop("Rolling update of {n} replicas, one at a time."), n=len(stale))],
        figures={"replicas": len(stale)},
        role=roles.pop() if len(roles) == 1 else "",
        actor=DecisionActor.USER if rollout.created_by else DecisionActor.LEADER,
        user=rollout.created_by,
    )
    _step(rollout)
    rollout.save()
    return rollout


def active(primary: Deployment) -> Rollout | None:
    return primary.rollouts.filter(status=Rollout.RUNNING).first()


def advance_all() -> int:
    """One pass over every running rollout (the reconcile tick); returns how many were looked at."""
    count = 0
    for pk in Rollout.objects.filter(status=Rollout.RUNNING).values_list("pk", flat=True):
        with transaction.atomic():
            rollout = Rollout.objects.select_for_update().filter(pk=pk, status=Rollout.RUNNING).first()
            if rollout is None:
                continue
            try:
                _step(rollout)
            except (InvalidInput, NotAllowed, services.DeploymentConflict) as error:
                # Permanent: the spec no longer plans (a 400/403 now) or the deployment is going.
                _fail(rollout, [part(gettext_noop("The rollout cannot go on: {why}"), why=_text(error))])
            rollout.save()
            count += 1
    return count


def _step(rollout: Rollout) -> None:
    """Move the rollout on from its phase as far as the observed states allow."""
    if rollout.phase == SURGE:
        _step_surge(rollout)
    elif rollout.phase == REPLACE:
        _step_replace(rollout)
    elif rollout.phase == CLEANUP:
        if not Deployment.objects.filter(name=rollout.surge).exists():
            rollout.surge = ""
            _next(rollout)
    elif rollout.phase == "":
        _next(rollout)


def _step_surge(rollout: Rollout) -> None:
    """The surge replica started: replace the current one once it runs, or fail if it broke."""
    surge = _row(rollout.surge)
    if surge is None or _broken(surge):
        _fail(
            rollout,
            _failure(gettext_noop("The new launch did not start on {name}."), rollout.surge, surge),
        )
        return
    if surge.observed_state == DeploymentState.RUNNING:
        _replace(rollout)


def _step_replace(rollout: Rollout) -> None:
    """The current replica restarts with the new launch: once it runs, drop the surge and go on."""
    row = _row(rollout.current)
    if row is None or _broken(row):
        if row is not None and services.active_operations(row).exists():
            return  # a retry of the new launch is under way: its outcome decides
        message = _failure(gettext_noop("{name} did not start with the new launch."), rollout.current, row)
        if row is not None:
            message += _roll_back(rollout, row)
        _fail(rollout, message)
        return
    if row.observed_state == DeploymentState.RUNNING and not services.active_operations(row).exists():
        rollout.done += 1
        surge = _row(rollout.surge) if rollout.surge else None
        if surge is None:
            _next(rollout)
            return
        services.delete(surge)
        rollout.phase = CLEANUP


def _next(rollout: Rollout) -> None:
    """The next stale replica: with a surge when free NPUs allow, else in place."""
    while rollout.done < rollout.total and _row(rollout.todo[rollout.done]) is None:
        rollout.done += 1  # deleted meanwhile: nothing to roll there
    if rollout.done >= rollout.total:
        rollout.status, rollout.phase, rollout.current = Rollout.SUCCEEDED, DONE, ""
        rollout.set_message([part(gettext_noop("All {n} replicas run the new launch."), n=rollout.total)])
        decisions.settle_pending(
            rollout.deployment, DecisionKind.ROLLOUT, DecisionOutcome.DONE, rollout.message_parts
        )
        return
    rollout.current = rollout.todo[rollout.done]
    surge: Deployment | None = None
    why_not: dict | None = part(gettext_noop("No room for a surge replica beside the move."))
    if rollout.spec.get("surge") is not False:  # False: the failover found no room for one beside the move
        surge, why_not = _start_surge(rollout)
    if surge is not None:
        rollout.surge, rollout.phase = surge.name, SURGE
        rollout.set_message(
            [
                part(
                    gettext_noop("{surge} starts with the new launch; then {name} is replaced."),
                    surge=surge.name,
                    name=rollout.current,
                )
            ]
        )
        return
    in_place = gettext_noop("{name} is replaced in place: it does not serve while it restarts.")
    rollout.set_message([p for p in (why_not, part(in_place, name=rollout.current)) if p is not None])
    _replace(rollout)


def _start_surge(rollout: Rollout) -> tuple[Deployment | None, dict | None]:
    """The surge replica started, or None and why not (a reason part). A disaggregated deployment's surge
    is an engine of the replaced one's role, with its role's KV config."""
    primary = rollout.deployment
    spec, model, artifact, served = _inputs(rollout)
    role = _role_of(rollout)
    index = role_members.next_index(primary, role) if role else replicas.next_free_index(primary)
    if len(role_member_name(primary.name, role, index)) > 63:
        return None, part(gettext_noop("The name is too long for a surge replica."))
    try:
        if role:
            planned, _index = role_members.planned_for_rollout(
                spec, model, artifact, rollout.created_by, primary, None, role
            )
        else:
            planned = plan_member(spec, model, artifact, rollout.created_by, index, served, None)
    except InvalidInput as error:
        return None, part(gettext_noop("No free NPUs for a surge replica ({why})."), why=_text(error))
    surge = services.create_deployment(planned, user=rollout.created_by, replica_of=primary)
    if role:
        role_members.take_engine_plan(surge, planned, role, spec["kv_connector"])
    return surge, None


def _role_of(rollout: Rollout) -> str:
    """The role of the engine being replaced ("" for a plain deployment's replica)."""
    if not rollout.spec.get("roles"):
        return ""
    return Deployment.objects.filter(name=rollout.current).values_list("role", flat=True).first() or ""


def why_no_surge(primary: Deployment, spec: dict[str, Any], model, artifact, user) -> str | None:
    """None when a surge replica of `spec` fits now (planned, nothing held); else why not, translated."""
    index = replicas.next_free_index(primary)
    if len(replicas.replica_name(primary.name, index)) > 63:
        return _("The name is too long for a surge replica.")
    try:
        plan_member(spec, model, artifact, user, index, replicas.served_name(spec, primary), None)
    except InvalidInput as error:
        return _("No free NPUs for a surge replica ({why}).").format(why=_text(error))
    return None


def _replace(rollout: Rollout) -> None:
    """Give the current replica the new plan and restart it (unless a start or stop is still running)."""
    row = Deployment.objects.select_for_update().get(name=rollout.current)
    if services.active_operations(row).exists():
        return  # the next tick tries again
    spec, model, artifact, served = _inputs(rollout)
    rollout.previous = _launch_of(row)
    if spec.get("roles"):
        planned, _index = role_members.planned_for_rollout(
            spec, model, artifact, rollout.created_by, rollout.deployment, row, row.role
        )
        role_members.take_engine_plan(row, planned, row.role, spec["kv_connector"])
    else:
        index = replicas.index_of(rollout.deployment.name, row.name)
        services.take_plan(row, plan_member(spec, model, artifact, rollout.created_by, index, served, row))
    user = rollout.created_by
    why = [part(gettext_noop("Rolling update by {user}"), user=user.get_username() if user else "-")]
    services.restart(row, user, reason=why)
    rollout.phase = REPLACE


def _launch_of(row: Deployment) -> dict[str, Any]:
    """What take_plan replaces, so a replica that fails with the new launch can go back to its old one."""
    return {
        "model": row.model_id,
        "artifact": row.artifact_id,
        "spec": row.spec,
        "plan": row.plan,
        "runtime_kind": row.runtime_kind,
        "endpoint": row.endpoint,
        "nodes": list(row.nodes.values_list("pk", flat=True)),
        "npus": list(row.npus.values_list("pk", flat=True)),
    }


def _roll_back(rollout: Rollout, row: Deployment) -> list[dict]:
    """Give `row` its launch from before the rollout and start it again; what happened, for the message."""
    previous = rollout.previous or {}
    if not previous:
        return []
    taken = Npu.objects.filter(pk__in=previous["npus"], deployments__isnull=False).exclude(deployments=row)
    if taken.exists():
        return [
            part(
                gettext_noop("Its old NPUs are in use by another deployment now, so it keeps the new launch.")
            )
        ]
    row.model_id, row.artifact_id = previous["model"], previous["artifact"]
    row.spec, row.plan = previous["spec"], previous["plan"]
    row.runtime_kind, row.endpoint = previous["runtime_kind"], previous["endpoint"]
    row.save()
    row.nodes.set(previous["nodes"])
    row.npus.set(previous["npus"])
    why = [part(gettext_noop("Rolled back: the new launch did not start."))]
    services.restart(row, rollout.created_by, reason=why)
    return [part(gettext_noop("{name} went back to its previous launch and starts again."), name=row.name)]


def _inputs(rollout: Rollout):
    spec = rollout.spec
    model, artifact = spec_model.resolve_model(spec, rollout.created_by, dry_run=True)
    return spec, model, artifact, replicas.served_name(spec, rollout.deployment)


def _fail(rollout: Rollout, message: list[dict]) -> None:
    """Stop rolling: remove the surge it started; the replicas not reached yet keep serving."""
    rollout.status = Rollout.FAILED
    rollout.set_message(message)
    decisions.settle_pending(rollout.deployment, DecisionKind.ROLLOUT, DecisionOutcome.FAILED, message)
    surge = _row(rollout.surge) if rollout.surge else None
    if surge is not None:
        services.delete(surge)
    log.warning("rollout %s of %s failed: %s", rollout.pk, rollout.deployment.name, rollout.message)
    alerting.rollout_failed(rollout.deployment)


def _row(name: str) -> Deployment | None:
    return Deployment.objects.exclude(desired_state=DesiredState.DELETED).filter(name=name).first()


def _broken(row: Deployment) -> bool:
    return row.observed_state in BROKEN or row.failed_restarts > 0


def _failure(head: str, name: str, row: Deployment | None) -> list[dict]:
    """`head` about the replica `name`, then the replica's own reason."""
    return [part(head, name=name), *(reasons.current(row) if row is not None else [])]


def _text(error) -> str:
    detail = getattr(error, "detail", None)
    if detail is None:
        return str(error)
    return flat_errors(detail)


def message_display(rollout: Rollout) -> str:
    """The rollout's message in the viewer's language (its parts translated, then filled)."""
    return in_language(spelled(rollout.message_parts, rollout.message))


def progress(rollout: Rollout | None) -> dict[str, Any] | None:
    """What the deployment's detail shows: {status, phase, done, total, message, current, surge}; `message`
    in English as the logs have it, `message_display` in the request's language (as `reason_display`)."""
    if rollout is None:
        return None
    return {
        "id": rollout.pk,
        "status": rollout.status,
        "phase": rollout.phase,
        "done": rollout.done,
        "total": rollout.total,
        "current": rollout.current,
        "surge": rollout.surge,
        "message": rollout.message,
        "message_display": message_display(rollout),
        "created": rollout.created.isoformat() if rollout.created else None,
    }
