"""Start, stop and delete as a person asks them (the page's buttons, the API, the CLI): for the whole
deployment, its replicas with it, as a spec's `state:` means it; services.start/stop act on one row (what a
node's drain stops is the rows on that node only).

- Start after a drain (or a stop) brings back every replica the spec wants, not only the primary.
- Deleting one replica is refused with "scale instead": the deployment keeps the count it wants, and
  `replicas_wanted` stays what the page and `rollout status` count against. Deleting the primary deletes
  the replicas with it.
- Restart of a serving deployment is a rolling update of the launch it has: each replica is restarted
  after a surge replica serves where NPUs allow (panel/deployments/rollouts/rollouts.py); where none fits
  and one replica serves alone, it needs `allow_downtime` (panel/deployments/downtime.py).
- While a rolling update runs, these wait their turn (409 naming the rollout): one change at a time.
"""

from __future__ import annotations

from django.db import transaction
from django.utils.translation import gettext as _
from django.utils.translation import gettext_noop

from panel.core.domain.choices import DecisionActor, DecisionKind, DeploymentState, DesiredState
from panel.deployments import decisions, downtime, revisions, services
from panel.deployments.conflicts import DeploymentConflict
from panel.deployments.models import Deployment
from panel.deployments.rollouts import replicas, rollouts
from panel.deployments.spec import spec_model, topology_change
from panel.deployments.spec.spec import parse_spec, spec_of


def primary_of(deployment: Deployment) -> Deployment:
    return deployment.replica_of if deployment.replica_of is not None else deployment


def members(primary: Deployment) -> list[Deployment]:
    """The primary's replicas that are meant to be there (the spec's 2..N), by name; for a disaggregated
    deployment every other engine of both roles (docs/serving-plane.md §1)."""
    if primary.roles_wanted:
        others = primary.replicas.exclude(desired_state=DesiredState.DELETED).exclude(pk=primary.pk)
        return sorted(others, key=lambda row: row.name)
    return [
        row
        for row in replicas.members(primary)
        if replicas.index_of(primary.name, row.name) <= primary.replicas_wanted
    ]


def create(planned, user=None, routing: str | None = None) -> Deployment:
    """The wizard's and `POST /deployments/`'s create: the deployment and its revision 1, at once. A name
    another request took meanwhile is a DeploymentConflict (409), not a 500. `routing`: the gateway's
    policy for it (the wizard's choice), kept on the row and in revision 1."""
    with transaction.atomic():
        deployment = services.create_deployment(planned, user=user)
        if routing and routing != deployment.routing:
            deployment.routing = routing
            deployment.save(update_fields=["routing"])
        revisions.record(deployment, spec_of(deployment), user, changes=[], effect="create", cause="create")
    return deployment


def start(deployment: Deployment, user=None) -> Deployment:
    """Start the deployment and every replica its spec wants (those a drain or a stop left stopped)."""
    revisions.check_no_rollout(deployment)
    with transaction.atomic():
        started = services.start(deployment, user)
        _decided(deployment, DecisionKind.START, gettext_noop("Start asked for."), user)
        if not deployment.replica_of_id:
            for row in members(deployment):
                _start_member(row, user)
    return started


def _start_member(row: Deployment, user) -> None:
    """Want the replica running; launch it unless it still stops (its stop's end launches it then) or
    runs already."""
    row = Deployment.objects.select_for_update().get(pk=row.pk)
    if row.desired_state == DesiredState.DELETED:
        return
    busy = services.active_operations(row).exists()
    if busy or row.observed_state in (DeploymentState.RUNNING, DeploymentState.STARTING):
        row.desired_state = DesiredState.RUNNING
        row.failed_restarts = 0
        row.save()
        return
    services.start(row, user)


def restart(deployment: Deployment, user=None, *, allow_downtime: bool = False) -> Deployment:
    """A serving primary rolls (surge first); a replica alone, or a deployment that does not serve,
    restarts in place (nothing of it serves that a restart could stop)."""
    revisions.check_no_rollout(deployment)
    if deployment.roles_wanted and not deployment.replica_of_id:
        return _restart_roles(deployment, user, allow_downtime=allow_downtime)
    if deployment.replica_of_id or deployment.observed_state != DeploymentState.RUNNING:
        with transaction.atomic():
            _decided(deployment, DecisionKind.RESTART, gettext_noop("Restart in place asked for."), user)
            return services.restart(deployment, user)
    spec = parse_spec(spec_of(deployment), deployment.name)
    model, artifact = spec_model.resolve_model(spec, user, dry_run=True)
    why = rollouts.why_no_surge(deployment, spec, model, artifact, user)
    downtime.check(deployment, why, allowed=allow_downtime, dry_run=False)
    with transaction.atomic():
        primary = Deployment.objects.select_for_update().get(pk=deployment.pk)
        revisions.check_no_rollout(primary)
        rows = [primary, *members(primary)]
        if any(services.active_operations(row).exists() for row in rows):
            raise DeploymentConflict(_("Wait for the current start or stop to finish, then restart."))
        serving = [row.name for row in rows if row.observed_state == DeploymentState.RUNNING]
        _decided(primary, DecisionKind.RESTART, gettext_noop("Restart asked for: replica by replica."), user)
        rollouts.begin(primary, spec, serving, user)
    return primary


def stop(deployment: Deployment, user=None) -> Deployment:
    """Stop the deployment and its replicas (its NPUs stay held for the next start)."""
    revisions.check_no_rollout(deployment)
    with transaction.atomic():
        stopped = services.stop(deployment, user)
        _decided(deployment, DecisionKind.STOP, gettext_noop("Stop asked for."), user)
        if not deployment.replica_of_id:
            for row in members(deployment):
                services.stop(row, user)
    return stopped


def _restart_roles(primary: Deployment, user, *, allow_downtime: bool) -> Deployment:
    """A disaggregated deployment restarts one engine at a time, each behind a surge engine of its role
    where NPUs allow (panel/deployments/spec/topology_change.py); a role whose one serving engine has no
    room for a surge stops serving meanwhile: only when that is confirmed."""
    spec = topology_change.restart_spec(primary)
    model, artifact = spec_model.resolve_model(spec, user, dry_run=True)
    why = topology_change.why_restart_stops_serving(primary, spec, model, artifact, user)
    topology_change.confirmed_downtime(primary, why, allowed=allow_downtime, dry_run=False)
    with transaction.atomic():
        locked = Deployment.objects.select_for_update().get(pk=primary.pk)
        revisions.check_no_rollout(locked)
        rows = [locked, *members(locked)]
        if any(services.active_operations(row).exists() for row in rows):
            raise DeploymentConflict(_("Wait for the current start or stop to finish, then restart."))
        serving = [row.name for row in rows if row.observed_state == DeploymentState.RUNNING]
        _decided(
            locked, DecisionKind.RESTART, gettext_noop("Restart asked for: engine by engine, per role."), user
        )
        rollouts.begin(locked, spec, serving, user)
    return locked


def _decided(deployment: Deployment, kind: str, reason: str, user) -> None:
    """A person's start, stop or restart as a recorded decision, settled when the engine runs or stops."""
    known = user if user is not None and user.is_authenticated else None
    actor = DecisionActor.USER if known else DecisionActor.LEADER
    decisions.record(deployment, kind, reason=reason, actor=actor, user=known)


def delete(deployment: Deployment, user=None) -> Deployment:
    """Delete the deployment (with its replicas); one replica alone is refused: scale instead."""
    primary = deployment.replica_of
    if primary is not None and primary.desired_state != DesiredState.DELETED:
        raise DeploymentConflict(
            _(
                "{name} is a replica of {primary}, which wants {count}: scale {primary} instead (Scale "
                "on its page, or apply its spec with another `replicas:`); a deleted replica would leave "
                "it short."
            ).format(name=deployment.name, primary=primary.name, count=primary.replicas_wanted)
        )
    return services.delete(deployment, user)
