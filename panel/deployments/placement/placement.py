"""Where a spec's deployment runs: the `placement:` block turned into the planner's `nodes: [{node, npus}]`.

A count or "auto" takes free, healthy NPUs on one NUMA node where it can, the way the wizard suggests them:
"auto" is the planner's smallest tensor-parallel layout that fits. Without a node, every node the user may
deploy to is tried, the one holding the model's copy first.

`spread: N` (not a spec key: the failover's re-placement of a multi-node replica, panel/deployments/failover/
replace.py, writes it) asks for N online nodes with the count of NPUs each, the head first: the nodes it runs
on now that still fit first, then those holding the model's copy.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.utils.translation import gettext as _

from panel.core.domain.choices import NodeStatus, NodeTransport, NpuHealthState
from panel.core.domain.errors import InvalidInput
from panel.deployments.models import Deployment
from panel.deployments.placement import hbm
from panel.deployments.placement.npus import (
    MIB,
    UNHEALTHY,
    NodeBlock,
    NpuRow,
    chip_of,
    node_blocks,
    on_one_numa_node,
)
from panel.deployments.spec.spec import AUTO
from panel.nodes.models import Node
from workers.engine.planner.plan import PlanInput, PlanInputError, plan
from workers.engine.planner.plan_cli import with_config_extras


def _fail(message: str):
    raise InvalidInput({"placement": [message]})


def _usable(block: NodeBlock, own: set[int]):
    """Free NPUs of the block; the changed deployment's own NPUs (pks in `own`) count as free: its engine
    goes when the change rolls out."""
    return [
        row
        for row in block.rows
        if row.npu.logic_id is not None
        and (not row.held_by)
        and (not row.processes or row.npu.pk in own)
        and row.npu.health not in UNHEALTHY
        and row.npu.health_state != NpuHealthState.FAILED  # out of service (docs/serving-plane.md §6)
        and row.npu.device_memory_mb
    ]


def _shareable(
    block: NodeBlock, own: set[int], sharing: Sharing | None, replacing
) -> tuple[list[NpuRow], list[str]]:
    """(NPUs of the block that others hold and this deployment may join, why the others may not), the
    NPUs with the least HBM to spare first: small models pack onto shared NPUs, whole ones stay for big
    models. Only with `placement.share`."""
    if sharing is None:
        return [], []
    taken = [
        row
        for row in block.rows
        if row.npu.logic_id is not None
        and (row.held_by or row.processes)
        and row.npu.pk not in own
        and row.npu.health not in UNHEALTHY
        and row.npu.health_state != NpuHealthState.FAILED
        and row.npu.device_memory_mb
    ]
    if not taken:
        return [], []
    figures = hbm.ledger(block.node, [row.npu for row in taken], replacing)
    fitting, refusals = [], []
    for row, ledger_row in zip(taken, figures, strict=True):
        found = hbm.problems([ledger_row], sharing.utilization, sharing.name, sharing.served)
        refusals += found
        if not found:
            fitting.append((ledger_row.free_mb, row))
    fitting.sort(key=lambda pair: (pair[0], pair[1].logic_id))
    return [row for _free, row in fitting], refusals


def _auto_count(facts: dict[str, Any], rows) -> int | None:
    """The planner's tensor-parallel size on these NPUs, or None when nothing fits."""
    npus = [row.npu for row in rows]
    request = PlanInput(
        npu_memory_bytes=min(npu.device_memory_mb for npu in npus) * MIB,
        npus_per_node=len(npus),
        chip=chip_of(npus),
    )
    try:
        result = plan(with_config_extras(facts, facts.get("config") or {}), request)
    except PlanInputError:
        return None
    return result.tensor_parallel_size if result.fits else None


def _too_few(block: NodeBlock, free: int, shared: int | None, count: int, why_not_shared: list[str]) -> str:
    if shared is None:
        refusal = _("{node} has {free} free NPUs; {count} are asked for.")
    else:
        refusal = _("{node} has {free} free NPUs and {shared} to share; {count} are asked for.")
    text = refusal.format(node=block.node.name, free=free, shared=shared, count=count)
    return " ".join([text, *why_not_shared])


@dataclass(frozen=True)
class Sharing:
    """A spec's `placement.share`: the deployment's name and gpu_memory_utilization, what its share is."""

    name: str
    utilization: float
    served: str  # the served model name: never beside its own replicas


def _choose_on(
    block: NodeBlock, wanted, facts: dict, own: set[int], sharing: Sharing | None = None, replacing=None
) -> tuple[list[int] | None, str]:
    """(logic ids, why not) on one node; ids [] for a CPU node."""
    if not block.rows:
        if wanted in (AUTO, 0):
            return [], ""
        return None, _("{node} has no NPUs.").format(node=block.node.name)
    shared, why_not_shared = _shareable(block, own, sharing, replacing)
    free = _usable(block, own)
    if wanted == AUTO:
        if not facts:
            return None, _(
                "The model has no facts yet (inspect it) to choose a count: give npus as a number."
            )
        if not free and not shared:
            return None, " ".join(
                [_("{node} has no free NPU.").format(node=block.node.name), *why_not_shared]
            )
        count = _auto_count(facts, free or shared)
        if count is None:
            return None, _("The model does not fit the free NPUs of {node}.").format(node=block.node.name)
    else:
        count = wanted
    if count == 0:
        return None, _("{node} has NPUs: give how many to use.").format(node=block.node.name)
    if len(free) + len(shared) < count:
        return None, _too_few(block, len(free), len(shared) if sharing else None, count, why_not_shared)
    # The NPUs it holds now first, so an unchanged count does not move the deployment.
    held = [row for row in free if row.npu.pk in own]
    if len(held) == count:
        return sorted(row.logic_id for row in held), ""
    if shared:  # shared NPUs first (fullest first), whole free ones only for what they lack
        chosen = shared[:count]
        if len(chosen) < count:
            chosen += on_one_numa_node(free, count - len(chosen))[0]
        return sorted(row.logic_id for row in chosen), ""
    chosen, _numa = on_one_numa_node(free, count)
    return [row.logic_id for row in chosen], ""


def candidate_nodes(user, node_name: str):
    nodes = Node.objects.visible_to(user).filter(transport=NodeTransport.AGENT)
    if node_name:
        found = nodes.filter(name=node_name)
        if not found.exists():
            _fail(_("No node named {name}.").format(name=node_name))
        return found
    return nodes.filter(status=NodeStatus.ONLINE)


def resolve(
    placement: dict[str, Any],
    *,
    user,
    facts: dict[str, Any],
    model_node_ids: list[int],
    only_model_nodes: bool = False,
    replacing: Deployment | None = None,
    name: str = "",
    utilization: float = 0.9,
    served: str = "",
) -> list[dict[str, Any]]:
    """[{node, npus: [logic ids]}] for the planner; field errors under `placement` when nothing fits.
    `only_model_nodes`: the spec names only the model, so only nodes with a copy of it will do.
    `name` and `utilization` (gpu_memory_utilization): what a `placement.share` deployment takes of an NPU."""
    wanted = placement.get("npus", AUTO)
    nodes = candidate_nodes(user, placement.get("node") or "")
    if only_model_nodes and not placement.get("node"):
        nodes = nodes.filter(pk__in=model_node_ids)
    if isinstance(wanted, list):
        names = list(nodes.values_list("name", flat=True)[:2])
        if len(names) != 1:
            _fail(_("Name the node these NPU ids are on (placement.node)."))
        return [{"node": names[0], "npus": wanted}]
    blocks = node_blocks(nodes, None, ignore=replacing)
    # The node with the model's copy first, then the current node of a deployment being changed.
    current = set(replacing.nodes.values_list("pk", flat=True)) if replacing is not None else set()
    own = set(replacing.npus.values_list("pk", flat=True)) if replacing is not None else set()
    blocks.sort(key=lambda block: (block.node.pk not in model_node_ids, block.node.pk not in current))
    reasons = []
    sharing = Sharing(name, utilization, served or name) if placement.get("share") else None
    spread = int(placement.get("spread") or 1)
    if spread > 1:
        return _spread(blocks, wanted, facts, own, current, spread)
    for block in blocks:
        ids, why = _choose_on(block, wanted, facts, own, sharing, replacing)
        if ids is not None:
            return [{"node": block.node.name, "npus": ids}]
        reasons.append(why)
    if not blocks:
        _fail(_("No online node to deploy to."))
    _fail(" ".join(reasons))
    return []


def _spread(blocks: list[NodeBlock], wanted, facts: dict, own: set[int], current: set[int], spread: int):
    """`spread` nodes with `wanted` NPUs each (a multi-node replica), its current nodes first."""
    blocks = sorted(blocks, key=lambda block: block.node.pk not in current)  # stable: model's copy next
    chosen, reasons = [], []
    for block in blocks:
        ids, why = _choose_on(block, wanted, facts, own)
        if ids is None:
            reasons.append(why)
            continue
        chosen.append({"node": block.node.name, "npus": ids})
        if len(chosen) == spread:
            return chosen
    found = _("{found} of the {wanted} nodes a multi-node replica needs have the NPUs free.")
    _fail(" ".join([found.format(found=len(chosen), wanted=spread), *reasons]))
    return []
