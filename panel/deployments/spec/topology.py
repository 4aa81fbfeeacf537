"""Apply a spec with `roles:` (panel/deployments/spec/roles_spec.py): one row per engine of each role,
each planned as a replica is (its own free NPUs and port), then given its role's --kv-transfer-config
(workers.engine.launch.kv_transfer, from the launch matrix row of the connector for the node's engine
version).

A dry run creates the rows inside a transaction it rolls back, so what it answers (the spec the deployment
would have, each role's NPUs and ports) is what the apply makes, NPUs of one role never planned twice. A
deployment that exists, with roles or going to or from them, changes in place
(panel/deployments/spec/topology_change.py).
"""

from __future__ import annotations

from typing import Any

from django.db import transaction

from panel.core.domain.choices import DesiredState
from panel.deployments import revisions, services
from panel.deployments.autoscale.config import stored_of
from panel.deployments.launch import pd_fabric
from panel.deployments.models import Deployment
from panel.deployments.placement.planning import DeploymentPlan
from panel.deployments.spec import role_members, topology_change
from panel.deployments.spec.roles_spec import ROLES
from panel.deployments.spec.spec import spec_of


class _RolledBack(Exception):
    def __init__(self, after: dict[str, Any], warnings: list[dict[str, Any]], planned: DeploymentPlan):
        super().__init__("dry run")
        self.after, self.warnings, self.planned = after, warnings, planned


def apply_roles(
    current: Deployment | None, spec, model, artifact, user, *, dry_run: bool, change
) -> dict[str, Any]:
    """The apply's outcome as Outcome's fields (result, effect, changes, planned, deployment, warnings,
    replicas, spec, steps, rollout)."""
    if current is None:
        wanted = {role: spec["roles"][role]["replicas"] for role in ROLES}
        return _create(spec, model, artifact, user, dry_run=dry_run, wanted=wanted)
    return topology_change.apply_change(current, spec, model, artifact, user, dry_run=dry_run, change=change)


def _create(spec, model, artifact, user, *, dry_run: bool, wanted: dict[str, int]) -> dict[str, Any]:
    replicas = {"wanted": sum(wanted.values()), "now": 0}
    outcome: dict[str, Any] = {"result": "created", "effect": "create", "changes": [], "replicas": replicas}
    if dry_run:
        try:
            with transaction.atomic():
                primary, made = _create_rows(spec, model, artifact, user)
                raise _RolledBack(spec_of(primary), _warnings(made), made[0][2])
        except _RolledBack as done:
            return {**outcome, "spec": done.after, "warnings": done.warnings, "planned": done.planned}
    with transaction.atomic():
        primary, made = _create_rows(spec, model, artifact, user)
        if spec["state"] == DesiredState.RUNNING:
            for _role, row, _planned in made:
                services.start(row, user)
        created = Deployment.objects.get(pk=primary.pk)
        revisions.record(created, spec_of(created), user, changes=[], effect="create", cause="create")
    return {
        **outcome,
        "deployment": created,
        "warnings": _warnings(made),
        "planned": made[0][2],
    }


def _warnings(made) -> list[dict[str, Any]]:
    """The plans' warnings with what the last checks say of the network between the roles' hosts (on the
    first plan too: the wizard's review shows that plan's)."""
    plans = [(role, planned) for role, _row, planned in made]
    first = plans[0][1]
    first.warnings = [*first.warnings, *pd_fabric.last_known(plans)]
    return role_members.warnings_of(planned for _role, planned in plans)


def _create_rows(
    spec, model, artifact, user
) -> tuple[Deployment, list[tuple[str, Deployment, DeploymentPlan]]]:
    """Every engine's row, created stopped (each holds its NPUs before the next is planned), then each given
    its role's KV transfer config once both roles' TP/DP are known."""
    primary: Deployment | None = None
    made = []
    for role in ROLES:
        for index in range(1, spec["roles"][role]["replicas"] + 1):
            planned = role_members.plan_engine(spec, model, artifact, user, role, index, None)
            row = services.create_deployment(planned, user=user, start=False, replica_of=primary)
            primary = primary or row
            made.append((role, row, planned))
    assert primary is not None, "each role has a replica (the spec's check)"
    parallel = role_members.parallel_of([(role, planned) for role, _row, planned in made])
    for role, row, planned in made:
        role_members.with_kv_transfer(planned, spec["kv_connector"], role, row.name, parallel)
        role_members.take_engine_plan(row, planned, role, spec["kv_connector"])
    Deployment.objects.filter(pk=primary.pk).update(
        roles_wanted={role: spec["roles"][role]["replicas"] for role in ROLES},
        replicas_wanted=1,
        labels=spec["labels"],
        routing=spec["routing"],
        autoscale=stored_of(spec),  # each role's own block (panel/deployments/autoscale/config.py)
    )
    primary.refresh_from_db()
    return primary, made
