"""The NPUs on offer on named nodes, as the planner's question: each node's free, healthy NPUs by the rule the
wizard takes them with (panel/deployments/placement/npus.py), the fewest on any node and the smallest memory
among them. In the catalog's web edge, so the catalog asks about real nodes without importing deployments."""

from __future__ import annotations

from django.utils.translation import gettext as _
from rest_framework.exceptions import ValidationError

from panel.catalog.planning import Offer
from panel.deployments.placement.npus import MIB, chip_of, free_rows, node_blocks
from panel.nodes.models import Node


def offered(user, names: list[str]) -> Offer:
    """The offer of the nodes `user` may see named `names`; field errors under `node` when one is unknown,
    has no free NPU, or the nodes hold different kinds of NPU."""
    wanted = list(dict.fromkeys(names))
    nodes = Node.objects.visible_to(user).filter(name__in=wanted)
    unknown = sorted(set(wanted) - set(nodes.values_list("name", flat=True)))
    if unknown:
        raise ValidationError({"node": [_("No node named {name}.").format(name=name) for name in unknown]})
    free = {block.node.name: free_rows(block) for block in node_blocks(nodes, None)}
    empty = [name for name in wanted if not free[name]]
    if empty:
        raise ValidationError({"node": [_("{node} has no free NPU.").format(node=name) for name in empty]})
    chips = {chip_of([row.npu for row in rows]) for rows in free.values()}
    if len(chips) > 1:
        raise ValidationError(
            {"node": [_("All nodes of one deployment must have the same kind of NPU (or none).")]}
        )
    return Offer(
        names=tuple(wanted),
        chip=chips.pop(),
        npus_per_node=min(len(rows) for rows in free.values()),
        npu_memory_bytes=min(row.memory_mb for rows in free.values() for row in rows) * MIB,
    )
