"""Re-placement after an NPU failed or a node was lost (docs/serving-plane.md §3, §6; issue 37 item 3), in the
reconcile tick on the beat leader, under the deployment's change lock.

Each engine row wanted running — of every role: a disaggregated deployment's decode engines as well as its
prefill ones — that has an engine on a `failed` NPU, or on a node offline past policy.node_lost's bound (a
host that lost power: its engines died with it and its agent answers nothing), is started again through
the rolling update's own path (panel/deployments/rollouts/rollouts.py), not a second one: a surge replica
starts first where free NPUs allow and the gateway pools it before the sick replica is re-planned and
restarted off the failed NPU, then the surge goes. The spec the rollout carries is the deployment's own, with
its NPUs given as a count: on the same node where it has enough free healthy NPUs (never a lost node), else
on any online node holding the model's copy (placement tries those first). Off a lost node the old engine
gets no stop: the row's restart goes to its new node, nothing is sent to the silent one, and the node keeps
a note to stop it when it returns (failover/fence.py). A multi-node replica is one row and one job: a part
on a failed NPU or a lost node re-places it as a whole (`_whole`), every part planned again on online nodes
with free healthy NPUs (its own nodes first), a surge copy first only where two copies fit
(policy.surge_room). Each move is a `replica_moved` decision whose reason names
the NPU, its node and the signal (or the lost node with how long it was silent), with the figures it was
decided on.

A deployment whose rolling update (or failover) is already under way waits for it: one change at a time.
When the move cannot be planned (no free healthy NPUs anywhere), that is recorded once, as a failed
decision, not every tick (decisions.last).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from django.db import transaction
from django.db.models import Q
from django.utils import timezone
from django.utils.translation import gettext_noop

from panel.core.domain.choices import (
    DecisionKind,
    DecisionOutcome,
    DesiredState,
    NodeStatus,
    NpuHealthState,
)
from panel.core.domain.errors import InvalidInput, NotAllowed
from panel.deployments import decisions, services
from panel.deployments.decision_models import Decision
from panel.deployments.failover import policy
from panel.deployments.models import Deployment
from panel.deployments.placement import placement
from panel.deployments.placement.npus import free_rows, node_blocks
from panel.deployments.reasons import part
from panel.deployments.rollouts import rollouts
from panel.deployments.spec import role_members, spec_model
from panel.deployments.spec.spec import parse_spec, spec_of
from panel.deployments.spec.spec_plan import flat_errors
from panel.nodes.models import Node, Npu, silent_limit

log = logging.getLogger(__name__)
RETRY_S = 120.0  # a move that failed is tried again after this long, not every tick
NODE_LOST = "node_lost"  # the signal of a move off a node offline past policy.Thresholds.node_offline_s


@dataclass(frozen=True)
class Cause:
    """Why a row leaves where it runs: a failed NPU (`npu`), or its node lost (`npu` None)."""

    node: Node
    npu: Npu | None
    signal: str
    figures: dict


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


def _lost_node(row: Deployment, now) -> Cause | None:
    """The first node of the row that is offline past the bound (policy.node_lost), with the figures."""
    for node in row.nodes.filter(status=NodeStatus.OFFLINE).order_by("name"):
        limit = silent_limit(node.heartbeat_interval).total_seconds()
        heard = node.last_heartbeat.timestamp() if node.last_heartbeat else None
        if policy.node_lost(True, heard, now.timestamp(), limit):
            # Figures are numbers (decisions.checked_figures): the node is named in the reason.
            figures = {
                "offline_after_s": limit,
                "moved_after_s": limit + policy.DEFAULT.node_offline_s,
            }
            if heard is not None:
                figures["silent_s"] = round(now.timestamp() - heard, 1)
            return Cause(node, None, NODE_LOST, figures)
    return None


def _cause(row: Deployment, now) -> Cause | None:
    """Why the policy moves this row now, or None: a failed NPU first (it names the chip), else a lost
    node."""
    npu = _failed_npu(row)
    if npu is not None:
        since = npu.health_changed_at.timestamp() if npu.health_changed_at else None
        view = policy.NpuView(npu.health_state, since)
        if policy.leave_now(view, _signal(npu), since, now.timestamp()):
            return Cause(npu.node, npu, _signal(npu), {"npu": npu.npu_id, "chip": npu.chip_id})
    return _lost_node(row, now)


def _to_move(rows: list[Deployment], now) -> list[tuple[Deployment, Cause]]:
    """The rows (with why) the policy moves now."""
    found = []
    for row in rows:
        cause = _cause(row, now)
        if cause is not None:
            found.append((row, cause))
    return found


def being_moved(row: Deployment) -> bool:
    """Whether the failover's move of this row is under way (its replica_moved decision still pending) and
    the row still holds the failed NPU or a part on the offline node: a restart in place would start it on
    that very NPU, or send it to the silent node, and the move's replacement would wait for it to end."""
    if not row.decisions.filter(kind=DecisionKind.REPLICA_MOVED, outcome=DecisionOutcome.PENDING).exists():
        return False
    return _failed_npu(row) is not None or row.nodes.filter(status=NodeStatus.OFFLINE).exists()


def affected_primaries() -> list[int]:
    """Primaries with a row wanted running on a failed NPU or on an offline node."""
    rows = (
        Deployment.objects.filter(desired_state=DesiredState.RUNNING)
        .filter(Q(npus__health_state=NpuHealthState.FAILED) | Q(nodes__status=NodeStatus.OFFLINE))
        .values_list("pk", "replica_of_id")
    )
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
    rows = engine_rows(primary)
    if any(services.active_operations(row).exists() for row in rows):
        return 0
    moving = _to_move(rows, now)
    if not moving:
        return 0
    user = primary.created_by
    spec = _spec_for_move(primary, moving, user)
    try:
        with transaction.atomic():  # a rollout that cannot even begin leaves nothing behind
            rollout = rollouts.begin(primary, spec, [row.name for row, _npu in moving], user)
    except (InvalidInput, NotAllowed, services.DeploymentConflict) as error:
        # Nowhere to go (no online node with free NPUs and the model's copy): said once, tried again after
        # RETRY_S, the replicas left where they are.
        why = [part(gettext_noop("The move cannot be placed now: {why}"), why=_text(error))]
        for row, cause in moving:
            decisions.settle(_record(row, cause), DecisionOutcome.FAILED, why)
        log.warning("failover of %s cannot be placed: %s", primary.name, error)
        return 0
    for row, cause in moving:
        _record(row, cause)
    log.info("failover of %s: rollout %s moves %s", primary.name, rollout.pk, [r.name for r, _n in moving])
    return 1


def _record(row: Deployment, cause: Cause) -> Decision:
    reason = _reason(row, cause)
    parts = len(services.parts_of(row))
    if parts > 1:
        whole = gettext_noop("It is one engine over {n} nodes: every part is placed again, as a whole.")
        reason.append(part(whole, n=parts))
    return decisions.record(
        row, DecisionKind.REPLICA_MOVED, reason=reason, figures=cause.figures, role=row.role
    )


def _text(error: Exception) -> str:
    detail = getattr(error, "detail", None)
    return flat_errors(detail) if detail is not None else str(error)


def engine_rows(primary: Deployment) -> list[Deployment]:
    """Every engine of the deployment, of every role (a disaggregated one's decode engines, `<name>-d<j>`,
    are no plain replicas), the primary first; rows being deleted left out."""
    others = primary.replicas.exclude(desired_state=DesiredState.DELETED).exclude(pk=primary.pk)
    return [primary, *others.order_by("pk")]


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


def _reason(row: Deployment, cause: Cause) -> list[dict]:
    if cause.npu is None:
        return [
            part(
                gettext_noop(
                    "{name} ran on {node}, which has been silent for {silent} s (offline after {limit} s, "
                    "moved after {bound} s): started again on another node with free NPUs and the model's "
                    "copy. Nothing moves back when the node returns."
                ),
                name=row.name,
                node=cause.node.name,
                silent=cause.figures.get("silent_s", "-"),
                limit=round(cause.figures["offline_after_s"]),
                bound=round(cause.figures["moved_after_s"]),
            )
        ]
    return [
        part(
            gettext_noop(
                "{name} ran on NPU {npu} of {node}, which failed ({signal}): started again on healthy NPUs, "
                "a surge replica first where free NPUs allow."
            ),
            name=row.name,
            npu=cause.npu.npu_id,
            node=cause.node.name,
            signal=cause.signal or "-",
        )
    ]


def _as_count(placement: dict[str, Any], nodes: list, node: str | None) -> dict[str, Any]:
    """A placement with its NPUs as a count (ids would pin the failed one), on `node` or on any node."""
    npus = placement.get("npus")
    count = len(npus) if isinstance(npus, list) else npus
    if nodes and len(nodes) == 1:
        count = len(nodes[0]["npus"])
    return {"npus": count} if node is None else {"node": node, "npus": count}


def _count_placement(spec: dict[str, Any], node: str | None) -> dict[str, Any]:
    """The spec with its NPUs as a count, on `node` or on any node; a disaggregated spec's roles alike
    (each engine of a role is planned from its role's placement)."""
    nodes = spec.get("nodes") or []
    placed = _as_count(dict(spec.get("placement") or {}), nodes, node)
    moved = {**spec, "nodes": [] if len(nodes) <= 1 else nodes, "placement": placed}
    if spec.get("roles"):
        moved["roles"] = {
            role: {**entry, "placement": _as_count(entry.get("placement") or placed, [], node)}
            for role, entry in spec["roles"].items()
        }
    if node is None:
        # Another node: the model's copy there, not this one's (placement tries nodes holding one first).
        moved = {**moved, "artifact": None, "path": ""}
    return moved


def _whole(spec: dict[str, Any], user) -> dict[str, Any]:
    """The spec that re-places a multi-node replica as a whole: as many nodes, as many NPUs on each, chosen
    again (placement's `spread`) on online nodes holding the model's copy, never on a failed NPU; `surge`
    False where two copies do not fit (a surge the replacement could then not follow would fail the
    rollout)."""
    nodes = spec["nodes"]
    per_node = len(nodes[0]["npus"])
    # The model's copy on each node it goes to, as for a single-node move: the copy or folder the spec
    # names is on the head node, which may be the lost one (placement then takes only nodes holding one).
    placed = {"npus": per_node, "spread": len(nodes)}
    moved = {**spec, "nodes": [], "placement": placed, "artifact": None, "path": ""}
    model, _artifact = spec_model.resolve_model(moved, user, dry_run=True)
    candidates = placement.candidate_nodes(user, "").filter(artifacts__model=model, artifacts__ready=True)
    candidates = candidates.distinct()
    free = [len(free_rows(block)) for block in node_blocks(candidates, None)]
    moved["surge"] = policy.surge_room(free, per_node, len(nodes))
    return moved


def _surge_fits(primary: Deployment, candidate: dict[str, Any], role: str, user) -> bool:
    model, artifact = spec_model.resolve_model(candidate, user, dry_run=True)
    if candidate.get("roles"):
        index = role_members.next_index(primary, role)
        role_members.plan_engine(candidate, model, artifact, user, role, index, None)
        return True
    return rollouts.why_no_surge(primary, candidate, model, artifact, user) is None


def _spec_for_move(primary: Deployment, moving, user) -> dict[str, Any]:
    """The spec for the rollout: a surge on the same node where it fits (not when that node is lost), else
    on any node with the model; where none fits, the rollout replaces in place, re-planning the row off the
    failed NPU or the lost node (its failure, if that cannot be planned either, settles the decisions)."""
    spec = parse_spec(spec_of(primary), primary.name)
    if len(spec.get("nodes") or []) > 1:
        return _whole(spec, user)
    row, cause = moving[0]
    candidates = [_count_placement(spec, None)]
    if cause.npu is not None:
        candidates.insert(0, _count_placement(spec, cause.node.name))
    for candidate in candidates:
        try:
            if _surge_fits(primary, candidate, row.role, user):
                return candidate
        except (InvalidInput, NotAllowed):
            continue
    return candidates[-1]
