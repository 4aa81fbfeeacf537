"""Where a spec's deployment runs: the `placement:` block turned into the planner's `nodes: [{node, npus}]`.

A count or "auto" takes free, healthy NPUs on one NUMA node where it can, the way the wizard suggests them:
"auto" is the planner's smallest tensor-parallel layout that fits. Without a node, every node the user may
deploy to is tried, the one holding the model's copy first.
"""

from __future__ import annotations

from typing import Any

from django.utils.translation import gettext as _
from rest_framework import serializers

from panel.core.choices import NodeStatus, NodeTransport
from panel.deployments.models import Deployment
from panel.deployments.planning import MIB, chip_of
from panel.deployments.spec import AUTO
from panel.deployments.wizard_placement import UNHEALTHY, NodeBlock, node_blocks, on_one_numa_node
from panel.nodes.models import Node
from workers.engine.plan import PlanInput, PlanInputError, plan
from workers.engine.plan_cli import with_config_extras


def _fail(message: str):
    raise serializers.ValidationError({"placement": [message]})


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
        and row.npu.device_memory_mb
    ]


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


def _choose_on(block: NodeBlock, wanted, facts: dict, own: set[int]) -> tuple[list[int] | None, str]:
    """(logic ids, why not) on one node; ids [] for a CPU node."""
    if not block.rows:
        if wanted in (AUTO, 0):
            return [], ""
        return None, _("{node} has no NPUs.").format(node=block.node.name)
    free = _usable(block, own)
    if wanted == AUTO:
        if not facts:
            return None, _(
                "The model has no facts yet (inspect it) to choose a count: give npus as a number."
            )
        if not free:
            return None, _("{node} has no free NPU.").format(node=block.node.name)
        count = _auto_count(facts, free)
        if count is None:
            return None, _("The model does not fit the free NPUs of {node}.").format(node=block.node.name)
    else:
        count = wanted
    if count == 0:
        return None, _("{node} has NPUs: give how many to use.").format(node=block.node.name)
    if len(free) < count:
        return None, _("{node} has {free} free NPUs; {count} are asked for.").format(
            node=block.node.name, free=len(free), count=count
        )
    # The NPUs it holds now first, so an unchanged count does not move the deployment.
    held = [row for row in free if row.npu.pk in own]
    if len(held) == count:
        return sorted(row.npu.logic_id for row in held), ""
    chosen, _numa = on_one_numa_node(free, count)
    return [row.npu.logic_id for row in chosen], ""


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
) -> list[dict[str, Any]]:
    """[{node, npus: [logic ids]}] for the planner; field errors under `placement` when nothing fits.
    `only_model_nodes`: the spec names only the model, so only nodes with a copy of it will do."""
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
    for block in blocks:
        ids, why = _choose_on(block, wanted, facts, own)
        if ids is not None:
            return [{"node": block.node.name, "npus": ids}]
        reasons.append(why)
    if not blocks:
        _fail(_("No online node to deploy to."))
    _fail(" ".join(reasons))
    return []
