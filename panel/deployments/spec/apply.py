"""Declarative apply: make the deployment called `name` look like a spec (panel/deployments/spec/spec.py).

The spec becomes the wizard's request and is planned exactly as the wizard's review plans it. Whether
anything changes is decided on the planned launch per node (model path, NPUs, every engine flag and the
environment they give), so a setting the planner fills (TP, max-model-len) or forces (eager mode) is not
a change unless its outcome is. A change stops the engine and starts it with the new launch; new NPUs are
held at once, the old ones are free once it stopped. Labels are the primary's own and change nothing
that runs: a spec whose labels (or routing, the gateway's) alone differ is `changed` with the effect `none`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from django.db import transaction
from django.utils.translation import gettext as _
from django.utils.translation import gettext_noop

from panel.audit import actions as audit
from panel.audit.services import record
from panel.catalog.models import Model, ModelArtifact
from panel.core.domain.choices import DesiredState
from panel.core.domain.errors import InvalidInput
from panel.deployments import downtime, reasons, revisions, services
from panel.deployments.autoscale import spec_field as autoscale_field
from panel.deployments.autoscale.config import CAUSE, block_of
from panel.deployments.models import Deployment, Rollout
from panel.deployments.placement.planned_rows import spec_after
from panel.deployments.placement.planning import DeploymentPlan
from panel.deployments.rollouts import replicas, rollouts
from panel.deployments.spec import spec_model, topology
from panel.deployments.spec.request import ENGINE_SETTINGS
from panel.deployments.spec.spec import idle_of, nodes_of, spec_of
from panel.deployments.spec.spec_plan import build_request, flat_errors, plan_for, plan_member, refuse

TUNING = ("env", "mtp_tokens")  # kept as the user gave them; the launch's env adds the chip recipe
# The primary's own settings that change nothing that runs (the count they lead to is a `replicas` change).
ROW_ONLY = ("labels", "routing", *autoscale_field.LINES)


@dataclass
class Outcome:
    result: str  # created | unchanged | changed
    effect: str  # none | create | restart | move_npus | start | stop | scale | rolling | topology
    changes: list[dict[str, Any]] = field(default_factory=list)
    planned: DeploymentPlan | None = None
    deployment: Deployment | None = None
    warnings: list[dict[str, Any]] = field(default_factory=list)
    replicas: dict[str, int] = field(default_factory=dict)  # {"wanted": N, "now": M before the apply}
    rollout: Rollout | None = None
    inspection: str | None = None  # result "waiting": the inspection the plan waits for (an operation id)
    spec: dict[str, Any] | None = None  # a dry run's: the spec the deployment would have (planned_rows)
    # With roles: what the change does to each engine, [{action: start|roll|restart|stop, name, role}].
    steps: list[dict[str, str]] = field(default_factory=list)


@dataclass
class Change:
    """Who asks for the change and how: recorded with its revision (panel/deployments/revisions.py)."""

    cause: str = "apply"  # create, apply, edit, scale, rollback
    restored: int | None = None  # a rollback: the revision it applies again
    allow_downtime: bool = False  # a change that cannot surge may stop serving (confirmed)
    seen: int = 0  # the newest revision when it was read: another one by the write is a 409


def _launches(deployment_spec: dict[str, Any]) -> list[tuple[str, dict]]:
    return [(part["node"], part["launch"]) for part in deployment_spec.get("parts") or []]


def diff(current: Deployment, planned: DeploymentPlan, model: Model, spec) -> list[dict[str, Any]]:
    """What differs between the running deployment and the planned one, field by field."""
    changes = []

    def note(name, before, after):
        if before != after:
            changes.append({"field": name, "from": before, "to": after})

    note("model", current.model.name, model.name)
    chosen = planned.data.get("artifact")  # the copy the spec names, or the one found for its model
    if not _links_its_own_folder(current, chosen):
        note("artifact", current.artifact_id, chosen.pk if chosen else None)
    old_nodes = nodes_of(current)
    new_nodes = [
        {"node": part.node.name, "npus": [npu.logic_id for npu in part.npus]} for part in planned.parts
    ]
    note("placement", old_nodes, new_nodes)
    old = (current.spec or {}).copy()
    new = planned.parts[0].payload
    for key in ENGINE_SETTINGS:
        if key not in TUNING:
            note(f"engine.{key}", old.get(key), new.get(key))
    tuning = (current.plan or {}).get("tuning") or {"env": {}, "mtp_tokens": 0}
    for key in TUNING:
        note(f"engine.{key}", tuning.get(key), planned.data.get(key))
    note("path", old.get("model_path"), new.get("model_path"))
    note("runtime", current.runtime_kind, spec["runtime"])
    note("image", (current.spec or {}).get("container", {}).get("image", ""), spec.get("image") or "")
    if bool(idle_of(current)) != bool(spec.get("idle")):  # the engines start with or without sleep mode
        note("idle", idle_of(current), dict(spec["idle"]) if spec.get("idle") else None)
    if not changes and _launches(current.spec or {}) != [(p.node.name, p.payload) for p in planned.parts]:
        changes.append({"field": "launch", "from": None, "to": None})  # e.g. the node's facts moved on
    return changes


def _links_its_own_folder(current: Deployment, chosen: ModelArtifact | None) -> bool:
    """A deployment made from a folder before that folder was a registered copy (or before deployments
    made by path were linked to theirs) now serves that copy: the same folder, nothing to restart."""
    model_path = (current.spec or {}).get("model_path")
    return current.artifact_id is None and chosen is not None and chosen.path == model_path


def effect_of(changes: list[dict], state: str) -> str:
    """What the change does to the engine: a stopped deployment only keeps its new settings for later."""
    # A new idle: timing or level alone changes no launch (one that turns sleep on or off rolls as stale).
    fields = {change["field"] for change in changes} - {"replicas", "labels", "idle", *ROW_ONLY}
    if state == DesiredState.STOPPED:
        return "stop" if "state" in fields else "none"
    if "placement" in fields:
        return "move_npus"
    if fields - {"state"}:
        return "restart"
    return "start" if "state" in fields else "none"


def _effect(changes: list[dict], stale: list[Deployment], state: str, current: Deployment) -> str:
    """A serving deployment whose launch changed rolls; a new replica count alone scales."""
    if stale and state == DesiredState.RUNNING and current.desired_state == DesiredState.RUNNING:
        return "rolling"
    if {change["field"] for change in changes} - {"labels", *ROW_ONLY} == {"replicas"}:
        return "scale"
    return effect_of(changes, state)


def apply(
    name: str, spec: dict[str, Any], user, *, dry_run: bool = False, change: Change | None = None
) -> Outcome:
    """Plan the spec and, unless `dry_run`, make it so. Raises InvalidInput (400), AdminOnlyFlag (403)
    and services.DeploymentConflict (409: a start, stop or rollout is under way, another change came
    first, the change would stop serving without `change.allow_downtime`, or the deployment is going)."""
    current = Deployment.objects.visible_to(user).filter(name=name).first()
    change = change or Change()
    change.seen = revisions.newest_number(current)  # compared again under the row lock: one at a time
    if current is not None and current.replica_of_id:
        refuse(
            "name",
            _("{name} is a replica of {primary}: apply the spec of {primary}.").format(
                name=name, primary=current.replica_of.name
            ),
        )
    if current is not None and current.desired_state == DesiredState.DELETED:
        raise services.DeploymentConflict(_("This deployment is being deleted; apply again once it is gone."))
    if current is not None and change.cause != CAUSE:
        # With autoscale the count (of each autoscaled role) is the autoscaler's: the one there is, moved
        # into [min, max].
        autoscale_field.keep_owned_counts(spec, current.replicas_wanted, current.roles_wanted or {})
    replicas.check(spec, name)
    if current is not None:
        revisions.check_no_rollout(current)
    model, artifact = spec_model.resolve_model(spec, user, dry_run=dry_run)
    if model is None:  # a dry run of a folder not registered yet
        return Outcome(
            "created" if current is None else "changed",
            "create",
            warnings=[
                {
                    "code": "model_registered_on_apply",
                    "level": "info",
                    "message": _(
                        "{path} is registered as a model and inspected when the spec is applied."
                    ).format(path=spec["path"]),
                }
            ],
        )
    inspection = spec_model.inspection_under_way(model)
    if inspection is not None:
        return _waiting(current, model, inspection)
    spec_model.refuse_failed_inspection(model, spec)
    if spec.get("roles") or (current is not None and current.roles_wanted):  # prefill/decode: §1
        return Outcome(
            **topology.apply_roles(current, spec, model, artifact, user, dry_run=dry_run, change=change)
        )
    request = build_request(spec, model, artifact, user, current)
    try:
        planned = plan_for(request, spec, user, current)
    except InvalidInput as error:
        if current is None and Deployment.objects.filter(name=name).exists():
            # Another pipeline created it after this one looked: a race, not a bad spec.
            raise services.DeploymentConflict(
                _("{name} was just created by another request; read it, then apply again.").format(name=name)
            ) from None
        raise _as_spec_fields(error, spec) from None
    if current is None:
        outcome = _create(planned, spec, model, artifact, user, dry_run=dry_run)
    else:
        outcome = _apply_to(current, planned, spec, model, artifact, user, dry_run=dry_run, change=change)
    if dry_run:
        outcome.spec = spec_after(name, spec, outcome.result, planned, current)
    return outcome


def _waiting(current: Deployment | None, model: Model, inspection) -> Outcome:
    """Nothing is planned before the model's inspection ends (its facts size the plan): apply again then."""
    message = _(
        "{model} is being inspected on {node}; apply again once the inspection has ended (operation {id}), "
        "or use apply --wait, which waits for it."
    ).format(model=model.name, node=inspection.node.name if inspection.node else "-", id=inspection.pk)
    outcome = Outcome(
        "waiting",
        "none",
        deployment=current,
        warnings=[{"code": "waiting_for_inspection", "level": "info", "message": message}],
    )
    outcome.inspection = str(inspection.pk)
    return outcome


def _apply_to(
    current: Deployment, planned, spec, model, artifact, user, *, dry_run: bool, change: Change
) -> Outcome:
    wanted = spec["replicas"]
    served = replicas.served_name(spec, current)
    others = replicas.members(current)
    stays = [row for row in others if replicas.index_of(current.name, row.name) <= wanted]
    changes = diff(current, planned, model, spec)
    plans = {current.pk: planned}
    stale = [current] if changes else []
    for row in stays:
        index = replicas.index_of(current.name, row.name)
        plans[row.pk] = plan_member(spec, model, artifact, user, index, served, row)
        if diff(row, plans[row.pk], model, replicas.spec_for(spec, index, served)):
            stale.append(row)
    if stale and not changes:
        changes.append({"field": "launch", "from": None, "to": None})  # a replica's launch differs
    now = 1 + len(others)
    changes += _row_changes(current, spec, now)
    changes += autoscale_field.changes(block_of(current, ""), spec.get("autoscale"), spec["replicas"], now)
    effect = _effect(changes, stale, spec["state"], current)
    outcome = Outcome(
        "changed" if changes else "unchanged", effect, changes, planned, current, planned.warnings
    )
    outcome.replicas = {"wanted": wanted, "now": now}
    if effect == "rolling":
        why = rollouts.why_no_surge(current, spec, model, artifact, user)
        said = downtime.check(current, why, allowed=change.allow_downtime, dry_run=dry_run, seen=change.seen)
        if said is not None:
            outcome.warnings = [*outcome.warnings, said]
    if not dry_run:
        _link_copies(plans, [current, *stays])
    if changes and not dry_run:
        with transaction.atomic():
            locked = Deployment.objects.select_for_update().get(pk=current.pk)
            revisions.check_no_rollout(locked)
            revisions.check_still(locked, change.seen)
            Deployment.objects.filter(pk=current.pk).update(
                previous_spec=spec_of(current), labels=spec["labels"], autoscale=spec.get("autoscale")
            )
            current.labels = spec["labels"]
            current.autoscale = spec.get("autoscale")
            if current.routing != spec["routing"]:
                current.routing = spec["routing"]
                current.save(update_fields=["routing"])  # saved, not updated: the gateway drops its pool copy
            if any(change["field"] not in ROW_ONLY for change in changes):
                # Scale first: the rollout's surge is a row above N that scaling must not take for a spare.
                _scale(current, spec, model, artifact, user, served)
                outcome.rollout = _change(current, plans, spec, effect, changes, user, stale)
            else:  # only labels or autoscale: nothing runs differently
                fields = sorted({change["field"] for change in changes})
                record(user, audit.DEPLOYMENT_APPLIED, current.name, changes=fields)
            applied = {
                **(spec_after(current.name, spec, "changed", planned, current) or {}),
                "labels": spec["labels"],
            }
            revisions.record(
                current, _without_empty_labels(applied), user, changes=changes, effect=effect,
                cause=change.cause, restored=change.restored, rollout=outcome.rollout,
            )  # fmt: skip
        outcome.deployment = Deployment.objects.get(pk=current.pk)
    return outcome


def _row_changes(current: Deployment, spec, now: int) -> list[dict[str, Any]]:
    """What changes in the primary's own fields: state, replica count, labels, idle: timing."""
    changes = []
    if current.desired_state != spec["state"]:
        changes.append({"field": "state", "from": current.desired_state, "to": spec["state"]})
    if now != spec["replicas"]:
        changes.append({"field": "replicas", "from": now, "to": spec["replicas"]})
    if (current.labels or {}) != spec["labels"]:
        changes.append({"field": "labels", "from": current.labels or {}, "to": spec["labels"]})
    if current.routing != spec["routing"]:
        changes.append({"field": "routing", "from": current.routing, "to": spec["routing"]})
    idle = dict(spec["idle"]) if spec.get("idle") else None
    if idle and idle_of(current) and idle != idle_of(current):  # new timing or level, still able to sleep
        changes.append({"field": "idle", "from": idle_of(current), "to": idle})
    return changes


def _without_empty_labels(spec: dict[str, Any]) -> dict[str, Any]:
    """As spec_of writes it: no `labels` key when there are none."""
    return {key: value for key, value in spec.items() if key != "labels" or value}


def _link_copies(plans: dict[int, DeploymentPlan], rows: list[Deployment]) -> None:
    """Rows serving a registered copy's folder without a link to it get the link: the copy cannot be
    deleted under them. Their launch does not change."""
    for row in rows:
        chosen = plans[row.pk].data.get("artifact")
        if _links_its_own_folder(row, chosen):
            Deployment.objects.filter(pk=row.pk, artifact__isnull=True).update(artifact=chosen)
            row.artifact = chosen


def _as_spec_fields(error: InvalidInput, spec: dict[str, Any]) -> InvalidInput:
    """The planner names the request's fields; a spec that wrote `placement` and `engine:` reads its errors
    under those names (`placement.npus`, `engine.max_model_len`)."""
    if not isinstance(error.detail, dict):
        return error
    renamed: dict[str, Any] = {}
    for name, messages in error.detail.items():
        if name == "nodes" and not spec.get("nodes"):
            name = "placement.npus"
        elif name in ENGINE_SETTINGS:
            name = f"engine.{name}"
        renamed.setdefault(name, []).extend(messages if isinstance(messages, list) else [messages])
    return InvalidInput(renamed)


def _create(
    planned: DeploymentPlan, spec: dict[str, Any], model, artifact, user, *, dry_run: bool
) -> Outcome:
    outcome = Outcome("created", "create", [], planned, None, planned.warnings)
    outcome.replicas = {"wanted": spec["replicas"], "now": 0}
    if not dry_run:
        with transaction.atomic():
            deployment = services.create_deployment(
                planned, user=user, start=spec["state"] == DesiredState.RUNNING
            )
            Deployment.objects.filter(pk=deployment.pk).update(  # the primary's own
                labels=spec["labels"], autoscale=spec.get("autoscale"), routing=spec["routing"]
            )
            _scale(deployment, spec, model, artifact, user, replicas.served_name(spec, None))
            created = Deployment.objects.get(pk=deployment.pk)
            revisions.record(created, spec_of(created), user, changes=[], effect="create", cause="create")
        outcome.deployment = Deployment.objects.get(pk=deployment.pk)
    return outcome


def _scale(primary: Deployment, spec, model, artifact, user, served: str) -> None:
    """Create the missing replicas (new rows, planned on free NPUs) or delete the highest ones."""
    wanted = spec["replicas"]
    Deployment.objects.filter(pk=primary.pk).update(replicas_wanted=wanted)
    primary.replicas_wanted = wanted
    there = {replicas.index_of(primary.name, row.name): row for row in replicas.members(primary)}
    for index, row in there.items():
        if index > wanted:
            services.delete(row, user)
    for index in range(2, wanted + 1):
        if index in there:
            continue
        name = replicas.replica_name(primary.name, index)
        if Deployment.objects.filter(name=name).exists():
            raise services.DeploymentConflict(
                _("{name} is still stopping after a scale-down; apply again once it is gone.").format(
                    name=name
                )
            )
        try:
            planned = plan_member(spec, model, artifact, user, index, served, None)
        except InvalidInput as error:
            refuse(
                "replicas",
                _("Replica {i} does not fit: {why}").format(i=index, why=flat_errors(error.detail)),
            )
        services.create_deployment(
            planned, user=user, start=spec["state"] == DesiredState.RUNNING, replica_of=primary
        )


def _change(current: Deployment, plans, spec, effect: str, changes, user, stale) -> Rollout | None:
    """Act on the rows that stay: a rollout for a serving deployment whose launch changed, else each row
    takes its plan and is restarted, started or stopped as the effect says."""
    deployment = Deployment.objects.select_for_update().get(pk=current.pk)
    rows = [deployment, *replicas.members(deployment)]
    rows = [row for row in rows if row.pk in plans]
    if effect in ("restart", "move_npus", "rolling") and any(
        services.active_operations(row).exists() for row in rows
    ):
        raise services.DeploymentConflict(_("Wait for the current start or stop to finish, then apply."))
    record(user, audit.DEPLOYMENT_APPLIED, deployment.name, changes=[c["field"] for c in changes])
    if effect == "rolling":
        return rollouts.begin(deployment, spec, [row.name for row in stale], user)
    if effect == "scale":
        return None
    why = [reasons.part(gettext_noop("A new spec was applied by {user}"), user=_who(user))]
    for row in rows:
        services.take_plan(row, plans[row.pk])
        if effect in ("restart", "move_npus"):
            services.restart(row, user, reason=why)
        elif spec["state"] == DesiredState.STOPPED:
            services.stop(row, user)
        elif effect == "start":
            services.start(row, user)
    return None


def _who(user) -> str:
    return user.get_username() if user is not None else "the panel"
