"""Re-placement after an NPU failed (docs/serving-plane.md §3, §6; issue 37 item 3), in the reconcile tick on
the beat leader, under the deployment's change lock.

Each replica wanted running that has an engine on a `failed` NPU is started again on healthy NPUs through
the rolling update's own path (panel/deployments/rollouts/rollouts.py), not a second one: a surge replica
starts first where free NPUs allow and the gateway pools it before the sick replica is re-planned and
restarted off the failed NPU, then the surge goes. The spec the rollout carries is the deployment's own, with
its NPUs given as a count: on the same node where it has enough free healthy NPUs, else on any node holding
the model's copy (placement tries those first). A multi-node replica is one row: it is re-planned as a
whole. Each move is a `replica_moved` decision whose reason names the NPU, its node and the signal.

A deployment whose rolling update (or failover) is already under way waits for it: one change at a time.
When the move cannot be planned (no free healthy NPUs anywhere), that is recorded once, as a failed
decision, not every tick (decisions.last).
"""

from __future__ import annotations

import logging
from typing import Any

from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext_noop
from rest_framework import serializers
from rest_framework.exceptions import APIException

from panel.core.domain.choices import DecisionKind, DecisionOutcome, DesiredState, NpuHealthState
from panel.deployments import decisions, services
from panel.deployments.decision_models import Decision
from panel.deployments.failover import policy
from panel.deployments.models import Deployment
from panel.deployments.reasons import part
from panel.deployments.rollouts import replicas, rollouts
from panel.deployments.spec import spec_model
from panel.deployments.spec.spec import parse_spec, spec_of
from panel.nodes.models import Npu

log = logging.getLogger(__name__)
RETRY_S = 120.0  # a move that failed is tried again after this long, not every tick


def _failed_npu(row: Deployment) -> Npu | None:
    return (
        row.npus.filter(health_state=NpuHealthState.FAILED)
        .select_related("node")
        .order_by("node__name", "npu_id", "chip_id")
        .first()
    )


def _signal(npu: Npu) -> str:
    reason = npu.health_reason if isinstance(npu.health_reason, dict) else {}
    return str(reason.get("signal") or "")


def _to_move(rows: list[Deployment], now) -> list[tuple[Deployment, Npu]]:
    """The rows (with their failed NPU) the policy moves now."""
    found = []
    for row in rows:
        npu = _failed_npu(row)
        if npu is None:
            continue
        since = npu.health_changed_at.timestamp() if npu.health_changed_at else None
        view = policy.NpuView(npu.health_state, since)
        if policy.leave_now(view, _signal(npu), since, now.timestamp()):
            found.append((row, npu))
    return found


def affected_primaries() -> list[int]:
    """Primaries with a row wanted running on a failed NPU."""
    rows = Deployment.objects.filter(
        desired_state=DesiredState.RUNNING, npus__health_state=NpuHealthState.FAILED
    ).values_list("pk", "replica_of_id")
    return sorted({primary or pk for pk, primary in rows})


def step_all(now=None) -> int:
    """One pass (the reconcile tick): start the moves that are due; returns how many rollouts it began."""
    now = now or timezone.now()
    begun = 0
    pending = Decision.objects.filter(kind=DecisionKind.REPLICA_MOVED, outcome=DecisionOutcome.PENDING)
    for primary in Deployment.objects.filter(pk__in=pending.values("deployment_id")):
        with transaction.atomic():
            settle_moves(primary)
    for pk in affected_primaries():
        try:
            with transaction.atomic():
                begun += _step(pk, now)
        except Exception:  # one deployment's failure must not stop the others' failover
            log.exception("failover of deployment %s failed", pk)
    return begun


def _step(pk: int, now) -> int:
    primary = Deployment.objects.select_for_update().filter(pk=pk).first()  # the change lock
    if primary is None or primary.desired_state != DesiredState.RUNNING or rollouts.active(primary):
        return 0  # gone, stopped, or a change under way: the next tick looks again
    if _settled_failed_lately(primary, now):
        return 0
    rows = [primary, *replicas.members(primary)]
    if any(services.active_operations(row).exists() for row in rows):
        return 0
    moving = _to_move(rows, now)
    if not moving:
        return 0
    user = primary.created_by
    spec = _spec_for_move(primary, moving, user)
    rollout = rollouts.begin(primary, spec, [row.name for row, _npu in moving], user)
    for row, npu in moving:
        decisions.record(row, DecisionKind.REPLICA_MOVED, reason=_reason(row, npu), figures=_figures(npu))
    log.info("failover of %s: rollout %s moves %s", primary.name, rollout.pk, [r.name for r, _n in moving])
    return 1


def settle_moves(primary: Deployment) -> None:
    """Settle the pending replica_moved decisions by how the rollout that carried them ended."""
    rollout = primary.rollouts.order_by("-created").first()
    if rollout is None or rollout.status == rollout.RUNNING:
        return
    pending = primary.decisions.filter(kind=DecisionKind.REPLICA_MOVED, outcome=DecisionOutcome.PENDING)
    for decision in pending:
        if rollout.status == rollout.SUCCEEDED:
            decisions.settle(decision, DecisionOutcome.DONE)
        else:
            decisions.settle(decision, DecisionOutcome.FAILED, rollout.message_parts or rollout.message)


def _settled_failed_lately(primary: Deployment, now) -> bool:
    """True when a move failed within RETRY_S (recorded once, tried again after a while, not every tick)."""
    last = decisions.last(primary, DecisionKind.REPLICA_MOVED)
    return (
        last is not None
        and last.outcome == DecisionOutcome.FAILED
        and last.settled is not None
        and (now - last.settled).total_seconds() < RETRY_S
    )


def _reason(row: Deployment, npu: Npu) -> list[dict]:
    return [
        part(
            gettext_noop(
                "{name} ran on NPU {npu} of {node}, which failed ({signal}): started again on healthy NPUs, "
                "a surge replica first where free NPUs allow."
            ),
            name=row.name,
            npu=npu.npu_id,
            node=npu.node.name,
            signal=_signal(npu) or "-",
        )
    ]


def _figures(npu: Npu) -> dict:
    return {"npu": npu.npu_id, "chip": npu.chip_id}


def _count_placement(spec: dict[str, Any], node: str | None) -> dict[str, Any]:
    """The spec with its NPUs as a count (ids would pin the failed one), on `node` or on any node."""
    placement = dict(spec.get("placement") or {})
    npus = placement.get("npus")
    nodes = spec.get("nodes") or []
    count = len(npus) if isinstance(npus, list) else npus
    if nodes and len(nodes) == 1:
        count = len(nodes[0]["npus"])
    placed = {"npus": count} if node is None else {"node": node, "npus": count}
    moved = {**spec, "nodes": [] if len(nodes) <= 1 else nodes, "placement": placed}
    if node is None:
        # Another node: the model's copy there, not this one's (placement tries nodes holding one first).
        moved = {**moved, "artifact": None, "path": ""}
    return moved


def _spec_for_move(primary: Deployment, moving, user) -> dict[str, Any]:
    """The spec for the rollout: a surge on the same node where it fits, else on any node with the model;
    where none fits, the rollout replaces in place, re-planning the row off the failed NPU (its failure,
    if that cannot be planned either, settles the decisions)."""
    spec = parse_spec(spec_of(primary), primary.name)
    if len(spec.get("nodes") or []) > 1:
        return spec  # a multi-node replica is re-planned as a whole with its own nodes' healthy NPUs
    node = moving[0][1].node.name
    for candidate in (_count_placement(spec, node), _count_placement(spec, None)):
        try:
            model, artifact = spec_model.resolve_model(candidate, user, dry_run=True)
            if rollouts.why_no_surge(primary, candidate, model, artifact, user) is None:
                return candidate
        except (serializers.ValidationError, APIException):
            continue
    return _count_placement(spec, None)
