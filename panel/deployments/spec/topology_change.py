"""A deployment that exists, with roles or going to or from them, changed in place (docs/serving-plane.md §1):
per-role replica counts, per-role engine settings, the connector, plain <-> prefill/decode.

Planning (`lay_out`) runs inside a savepoint it rolls back: every engine the spec wants is planned in place of
its row (which keeps its NPUs) or as a new row (which holds its NPUs before the next is planned), each given
its role's KV config once both roles' TP/DP are known; what it answers is the plan: which engines start,
which stop, which take a new launch, and the spec the deployment would have. The apply then does it:

- the same kind of topology, serving: new engines start at once, engines beyond a role's count go (as a plain
  scale-down), and engines whose launch changed roll one at a time, a surge of their role first where NPUs
  allow (panel/deployments/rollouts/rollouts.py), so a change to one role rolls that role's engines only
  (a role's TP/DP is in both roles' KV config: both roll);
- a new kind (plain <-> prefill/decode, or another connector), serving: every engine takes its new launch
  and restarts at once, new ones start, the rest stop. The gateway serves a name either as plain replicas
  or as a prefill/decode pair (panel/gateway/proxy/pd.py), so the old and the new set cannot serve together;
  the plan says it stops first, and the change needs allow_downtime as any change that stops serving;
- stopped (or being stopped or started): every row takes its plan, then the state is applied to all.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from django.db import transaction
from django.utils.translation import gettext as _

from panel.core.domain.choices import DeploymentState, DesiredState
from panel.core.domain.errors import InvalidInput
from panel.deployments import downtime, revisions, services
from panel.deployments.autoscale import spec_field as autoscale_field
from panel.deployments.autoscale.config import blocks_in, blocks_of, stored_of
from panel.deployments.launch import pd_fabric
from panel.deployments.models import Deployment, Rollout
from panel.deployments.placement.planning import DeploymentPlan
from panel.deployments.rollouts import replicas, rollouts
from panel.deployments.spec import role_members
from panel.deployments.spec.request import ENGINE_SETTINGS
from panel.deployments.spec.roles_spec import ROLES, connector_of, role_member_name, role_rows
from panel.deployments.spec.spec import parse_spec, spec_of
from panel.deployments.spec.spec_plan import flat_errors, plan_member, refuse

# What a row's launch says that the diff names per role (the rest shows as `launch`).
ENGINE_LINES = tuple(key for key in ENGINE_SETTINGS if key not in ("env", "mtp_tokens")) + ("model_path",)


@dataclass
class Layout:
    """What applying the spec does to the rows, and the plan of each engine the spec wants."""

    targets: list[tuple[str, int, str]]  # (role, index, name) of every engine the spec wants, in order
    plans: dict[str, DeploymentPlan]  # by name, with each role's KV config
    new: list[str] = field(default_factory=list)
    stale: list[str] = field(default_factory=list)  # rows that stay and launch differently
    removed: list[str] = field(default_factory=list)
    removed_roles: dict[str, str] = field(default_factory=dict)  # a removed row's role, by name
    parallel: dict[str, list[int]] = field(default_factory=dict)
    no_surge: dict[str, str] = field(default_factory=dict)  # role of a stale row -> why no surge fits
    after: dict[str, Any] = field(default_factory=dict)  # the spec the deployment would have
    lines: list[dict[str, Any]] = field(default_factory=list)  # per-role engine lines of the diff


class _RolledBack(Exception):
    def __init__(self, layout: Layout):
        super().__init__("planned")
        self.layout = layout


def targets_of(spec: dict[str, Any]) -> list[tuple[str, int, str]]:
    if not spec.get("roles"):
        return [("", i, replicas.replica_name(spec["name"], i)) for i in range(1, spec["replicas"] + 1)]
    return [
        (role, i, role_member_name(spec["name"], role, i))
        for role in ROLES
        for i in range(1, spec["roles"][role]["replicas"] + 1)
    ]


def rows_of(primary: Deployment) -> dict[str, Deployment]:
    """Every engine row of the deployment (the primary first), not being deleted."""
    rows = [primary, *primary.replicas.exclude(desired_state=DesiredState.DELETED).order_by("pk")]
    return {row.name: row for row in rows}


def kind_of(primary_or_spec) -> str:
    """ "plain", or the connector of a disaggregated deployment: a change of kind cannot roll."""
    if isinstance(primary_or_spec, Deployment):
        return connector_of(primary_or_spec) if primary_or_spec.roles_wanted else "plain"
    if primary_or_spec.get("roles"):
        return primary_or_spec.get("kv_connector") or ""
    return "plain"


def lay_out(current: Deployment, spec, model, artifact, user) -> Layout:
    """Plan every engine the spec wants against the rows there are, changing nothing (a savepoint that is
    rolled back). 400 naming the role when an engine does not fit."""
    try:
        with transaction.atomic():
            raise _RolledBack(_plan_rows(current, spec, model, artifact, user))
    except _RolledBack as done:
        return done.layout


def _plan_rows(current: Deployment, spec, model, artifact, user) -> Layout:
    before = rows_of(current)
    fresh = rows_of(Deployment.objects.get(pk=current.pk))  # changed here, rolled back after
    served = replicas.served_name(spec, current)
    layout = Layout(targets=targets_of(spec), plans={})
    for role, index, name in layout.targets:
        row = fresh.get(name)
        if row is None and Deployment.objects.filter(name=name).exists():
            refuse(
                "roles" if role else "replicas",
                _("{name} is still stopping after a scale-down; apply again once it is gone.").format(
                    name=name
                ),
            )
        if role:
            planned = role_members.plan_engine(spec, model, artifact, user, role, index, row)
        else:
            planned = plan_member(spec, model, artifact, user, index, served, row)
        layout.plans[name] = planned
        if row is None:  # held, so that the next engine is planned on other NPUs
            services.create_deployment(planned, user=user, start=False, replica_of=fresh[current.name])
            layout.new.append(name)
        else:
            held = list(row.npus.all())
            services.take_plan(row, planned)
            # Its old NPUs stay held too: a rolling update keeps them until the row is replaced, so a new
            # engine must not be planned on them.
            row.npus.add(*held)
    layout.parallel = role_members.parallel_of([(r, layout.plans[n]) for r, _i, n in layout.targets if r])
    for role, _index, name in layout.targets:
        if role:
            role_members.with_kv_transfer(
                layout.plans[name], spec["kv_connector"], role, name, layout.parallel
            )
    wanted = {name for _r, _i, name in layout.targets}
    layout.removed = [name for name in before if name not in wanted]
    layout.removed_roles = {name: before[name].role for name in layout.removed}
    for role, _index, name in layout.targets:
        row = before.get(name)
        if row is not None and _launch_differs(row, layout.plans[name], role):
            layout.stale.append(name)
            layout.lines += _engine_lines(row, layout.plans[name], role, layout.lines)
    primary = Deployment.objects.get(pk=current.pk)
    for role in {role for role, _i, name in layout.targets if name in layout.stale}:
        layout.no_surge[role] = _why_no_surge(spec, model, artifact, user, primary, role, served) or ""
    layout.after = _spec_after(primary, spec, layout)
    return layout


def _launch_differs(row: Deployment, planned: DeploymentPlan, role: str) -> bool:
    launches = [(part["node"], part["launch"]) for part in (row.spec or {}).get("parts") or []]
    return row.role != role or launches != [(part.node.name, part.payload) for part in planned.parts]


def _engine_lines(row: Deployment, planned: DeploymentPlan, role: str, seen: list[dict]) -> list[dict]:
    """The diff's lines of one changed engine, each once per role: `roles.<role>.engine.<key>` (plain:
    `engine.<key>`), its placement, else `launch` (the KV config, the role itself)."""
    prefix = f"roles.{role}." if role else ""
    known = {line["field"] for line in seen}
    lines = []
    old, new = row.spec or {}, planned.parts[0].payload

    def note(name, before, after):
        if before != after and name not in known:
            lines.append({"field": name, "role": role, "from": before, "to": after})

    for key in ENGINE_LINES:
        note(f"{prefix}engine.{key}", old.get(key), new.get(key))
    note(f"{prefix}placement", _npus(row), [npu.logic_id for npu in planned.parts[0].npus])
    if not lines and f"{prefix}launch" not in known:
        lines.append({"field": f"{prefix}launch", "role": role, "from": None, "to": None})
    return lines


def _npus(row: Deployment) -> list[int]:
    parts = (row.spec or {}).get("parts") or []
    return list((parts[0].get("launch") or {}).get("logic_ids") or []) if parts else []


def _why_no_surge(spec, model, artifact, user, primary: Deployment, role: str, served: str) -> str | None:
    """None when a surge engine of `role` fits now (planned, nothing held); else why not, translated."""
    try:
        if role:
            role_members.plan_engine(
                spec, model, artifact, user, role, role_members.next_index(primary, role), None
            )
        else:
            plan_member(spec, model, artifact, user, replicas.next_free_index(primary), served, None)
    except InvalidInput as error:
        return _("No free NPUs for a surge replica ({why}).").format(why=flat_errors(error.detail))
    return None


def _spec_after(primary: Deployment, spec, layout: Layout) -> dict[str, Any]:
    """Every row with its plan, the primary with the spec's own fields: its spec as `?format=spec` says."""
    rows = rows_of(primary)
    for role, _index, name in layout.targets:
        role_members.take_engine_plan(rows[name], layout.plans[name], role, spec.get("kv_connector"))
    for name in layout.removed:
        Deployment.objects.filter(name=name).update(desired_state=DesiredState.DELETED)
    _set_primary_fields(primary, spec)
    primary = Deployment.objects.get(pk=primary.pk)
    primary.desired_state = spec["state"]
    return spec_of(primary)


def _set_primary_fields(primary: Deployment, spec) -> None:
    roles = spec.get("roles")
    fields = {
        "roles_wanted": {role: roles[role]["replicas"] for role in ROLES} if roles else {},
        "replicas_wanted": 1 if roles else spec["replicas"],
        "labels": spec["labels"],
        "autoscale": stored_of(spec),  # with roles, each role's block (autoscale/config.py)
        "routing": spec["routing"],
    }
    for name, value in fields.items():
        setattr(primary, name, value)  # the row object is saved whole again later (take_plan)
    # Saved, not updated: the gateway drops its pool copy on the save signal (a new routing).
    primary.save(update_fields=list(fields))


def changes_of(current: Deployment, spec, layout: Layout) -> list[dict[str, Any]]:
    """The diff: the connector, the topology or each role's count, each role's engine lines, the primary's
    own fields."""
    changes = []
    before_connector = connector_of(current) or None if current.roles_wanted else None
    if before_connector != (spec.get("kv_connector") or None):
        changes.append({"field": "kv_connector", "from": before_connector, "to": spec.get("kv_connector")})
    now, asked = _counts(current), _asked_counts(spec)
    if set(now) != set(asked):  # plain <-> prefill/decode
        changes.append({"field": "roles", "from": _as_roles(now), "to": _as_roles(asked)})
    else:
        for role in now:
            if now[role] != asked[role]:
                changes.append({"field": "replicas", "role": role, "from": now[role], "to": asked[role]})
    changes += layout.lines
    changes += _autoscale_lines(current, spec, now, asked)
    if current.desired_state != spec["state"]:
        changes.append({"field": "state", "from": current.desired_state, "to": spec["state"]})
    if (current.labels or {}) != spec["labels"]:
        changes.append({"field": "labels", "from": current.labels or {}, "to": spec["labels"]})
    if current.routing != spec["routing"]:
        changes.append({"field": "routing", "from": current.routing, "to": spec["routing"]})
    return changes


def _autoscale_lines(current: Deployment, spec, now: dict[str, int], asked: dict[str, int]) -> list[dict]:
    """Each count's `autoscale:` that changes (a role's lines name it), and who owns a count from now on."""
    before = blocks_of(current)
    after = blocks_in(stored_of(spec))
    lines = []
    for role in ("", *ROLES):  # a count without a block before or after gives no line
        lines += autoscale_field.changes(
            before.get(role), after.get(role), asked.get(role, 0), now.get(role, 0), role
        )
    return lines


def _counts(current: Deployment) -> dict[str, int]:
    if current.roles_wanted:
        return {role: int(current.roles_wanted.get(role) or 0) for role in ROLES}
    return {"": 1 + len(replicas.members(current))}


def _asked_counts(spec) -> dict[str, int]:
    if spec.get("roles"):
        return {role: spec["roles"][role]["replicas"] for role in ROLES}
    return {"": spec["replicas"]}


def _as_roles(counts: dict[str, int]) -> dict[str, Any] | None:
    if "" in counts:
        return None
    return {role: {"replicas": count} for role, count in counts.items()}


def apply_change(
    current: Deployment, spec, model, artifact, user, *, dry_run: bool, change
) -> dict[str, Any]:
    """Outcome's fields for applying `spec` to `current` (see the module docstring)."""
    layout = lay_out(current, spec, model, artifact, user)
    changes = changes_of(current, spec, layout)
    serving = current.desired_state == DesiredState.RUNNING and spec["state"] == DesiredState.RUNNING
    regrown = kind_of(current) != kind_of(spec)
    effect = _effect(changes, layout, serving, regrown, spec["state"])
    steps = _steps(layout, effect, starts=spec["state"] == DesiredState.RUNNING)
    warnings = _warnings(layout, steps, regrown and serving)
    said = _downtime(current, layout, effect, allowed=change.allow_downtime, dry_run=dry_run)
    if said is not None:
        warnings.append(said)
    outcome: dict[str, Any] = {
        "result": "changed" if changes else "unchanged",
        "effect": effect,
        "changes": changes,
        "deployment": current,
        "warnings": warnings,
        "steps": steps,
        "replicas": {"wanted": len(layout.targets), "now": len(rows_of(current))},
        "planned": layout.plans.get(current.name),
    }
    if dry_run or not changes:
        return {**outcome, "spec": layout.after if changes else spec_of(current)}
    with transaction.atomic():
        locked = Deployment.objects.select_for_update().get(pk=current.pk)
        revisions.check_no_rollout(locked)
        revisions.check_still(locked, change.seen)
        locked.previous_spec = spec_of(locked)  # on the object: take_plan saves it whole later
        locked.save(update_fields=["previous_spec"])
        rollout = _carry_out(locked, spec, layout, effect, user)
        revisions.record(
            locked, layout.after, user, changes=changes, effect=effect, cause=change.cause,
            restored=change.restored, rollout=rollout,
        )  # fmt: skip
    return {**outcome, "deployment": Deployment.objects.get(pk=current.pk), "rollout": rollout}


def _effect(changes, layout: Layout, serving: bool, regrown: bool, state: str) -> str:
    fields = {change["field"] for change in changes} - {"labels", "routing", *autoscale_field.LINES}
    if not fields:
        return "none"
    if not serving:  # the rows keep their new launch for later; a new state goes to every row
        if "state" in fields:
            return "start" if state == DesiredState.RUNNING else "stop"
        return "none"
    if regrown:
        return "topology"
    return "rolling" if layout.stale else "scale"


def _steps(layout: Layout, effect: str, *, starts: bool) -> list[dict[str, str]]:
    """What the apply does to each engine: start (a new one; create when the spec is stopped), roll (one at
    a time, a surge of its role first where NPUs allow), restart (its new launch at once), update (its new
    launch for its next start: the deployment does not serve), stop (removed)."""
    roles = {name: role for role, _i, name in layout.targets}
    new = "start" if starts else "create"
    changed = {"rolling": "roll", "topology": "restart"}.get(effect, "update")
    steps = [{"action": new, "name": name, "role": roles[name]} for name in layout.new]
    steps += [{"action": changed, "name": name, "role": roles[name]} for name in layout.stale]
    return steps + [
        {"action": "stop", "name": name, "role": layout.removed_roles.get(name, "")}
        for name in layout.removed
    ]


def _warnings(layout: Layout, steps, stops_first: bool) -> list[dict[str, Any]]:
    warnings = role_members.warnings_of(layout.plans.values())
    if not steps:
        return warnings
    # Engines will launch: what the last checks saw between the roles' hosts, where they are on several.
    planned = [(role, layout.plans[name]) for role, _i, name in layout.targets if name in layout.plans]
    warnings += pd_fabric.last_known(planned)

    def names(action):
        return ", ".join(step["name"] for step in steps if step["action"] == action) or "-"

    message = _(
        "Plan: start {start}; roll one at a time {roll}; restart at once {restart}; stop {stop}."
    ).format(start=names("start"), roll=names("roll"), restart=names("restart"), stop=names("stop"))
    kept = [step["name"] for step in steps if step["action"] in ("create", "update")]
    if kept:  # a deployment that does not serve: they take their launch for its next start
        message += " " + _("For the next start: {names}.").format(names=", ".join(kept))
    if stops_first:
        message += " " + _(
            "The topology changes kind (plain and prefill/decode, or the KV connector): the old engines and "
            "the new cannot serve one name together, so they stop first and every engine starts with its new "
            "launch."
        )
    return [*warnings, {"code": "topology_plan", "level": "info", "message": message}]


def _downtime(current: Deployment, layout: Layout, effect: str, *, allowed: bool, dry_run: bool):
    """A change that stops serving says so and needs allow_downtime: a change of kind while engines serve,
    or a rolling change of a role whose one serving engine cannot surge."""
    rows = rows_of(current)
    serving = [row for row in rows.values() if row.observed_state == DeploymentState.RUNNING]
    if effect == "topology" and serving:
        why = _("Every engine restarts at once with the new topology.")
    elif effect == "rolling":
        why = next(
            (
                reason
                for role, reason in layout.no_surge.items()
                if reason and sum(row.role == role for row in serving) == 1
            ),
            "",
        )
    else:
        why = ""
    return confirmed_downtime(current, why, allowed=allowed, dry_run=dry_run)


def confirmed_downtime(primary: Deployment, why: str | None, *, allowed: bool, dry_run: bool) -> dict | None:
    """The downtime warning of a change that stops serving for `why` (None: it keeps serving); raises
    DowntimeNotAllowed for a real change that was not confirmed (downtime.py counts plain replicas only)."""
    if not why:
        return None
    said = downtime.warning(primary, downtime.start_seconds(primary), why)
    if not allowed and not dry_run:
        downtime.refuse(primary, said)
    return said


def _carry_out(primary: Deployment, spec, layout: Layout, effect: str, user) -> Rollout | None:
    """Do the planned change under the primary's row lock: new engines, removed ones, then the changed ones
    rolled (one at a time) or restarted with their plans."""
    rows = rows_of(primary)
    connector = spec.get("kv_connector")
    # New engines start with the others: at once while it serves, with the new state's start otherwise.
    start_new = spec["state"] == primary.desired_state == DesiredState.RUNNING
    busy = [row.name for row in rows.values() if services.active_operations(row).exists()]
    if layout.stale and busy and effect in ("rolling", "topology"):
        raise services.DeploymentConflict(_("Wait for the current start or stop to finish, then apply."))
    _set_primary_fields(primary, spec)
    for name in layout.removed:
        services.delete(rows[name], user)
    for role, _index, name in layout.targets:
        planned = layout.plans[name]
        if name in layout.new:
            row = services.create_deployment(planned, user=user, start=False, replica_of=primary)
            role_members.take_engine_plan(row, planned, role, connector)
            if start_new:
                services.start(row, user)
        elif name in layout.stale and effect != "rolling":
            row = primary if name == primary.name else rows[name]
            role_members.take_engine_plan(row, planned, role, connector)
            if effect == "topology":
                services.restart(row, user)
    if effect == "rolling":
        return rollouts.begin(primary, {**spec, role_members.PARALLEL: layout.parallel}, layout.stale, user)
    if primary.desired_state != spec["state"]:
        set_state(primary, spec["state"], user)
    return None


def set_state(primary: Deployment, state: str, user) -> None:
    for row in rows_of(Deployment.objects.get(pk=primary.pk)).values():
        if state == DesiredState.RUNNING:
            services.start(row, user)
        else:
            services.stop(row, user)
    Deployment.objects.filter(pk=primary.pk).update(desired_state=state)


def restart_spec(primary: Deployment) -> dict[str, Any]:
    """What a rolling restart of a disaggregated deployment rolls with: its own spec and each role's TP/DP
    as its engines run (every engine's KV config names both)."""
    spec = parse_spec(spec_of(primary), primary.name)
    return {**spec, role_members.PARALLEL: role_members.running_parallel(primary)}


def why_restart_stops_serving(primary: Deployment, spec, model, artifact, user) -> str | None:
    """Why restarting one engine at a time still stops serving: a role whose one serving engine has no room
    for a surge of its role (translated); None when every role keeps an engine serving."""
    for role in ROLES:
        serving = [row for row in role_rows(primary, role) if row.observed_state == DeploymentState.RUNNING]
        if len(serving) == 1:
            why = _why_no_surge(spec, model, artifact, user, primary, role, "")
            if why:
                return why
    return None
