"""What a model needs on the typical Ascend node (Atlas 800I A2: 8 × 910B, 64 GiB HBM each), what would fit
when it does not, and the serving advice for a named kind of node: the plan there, the proposals, the
prefill/decode split for expected prompt and output lengths, and the serving recipes written for the model.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.utils.translation import gettext as _

from workers.engine.launch.recipes import serving_for
from workers.engine.planner.memory import BLOCK_SIZE, GIB
from workers.engine.planner.plan import PlanInput
from workers.engine.planner.plan_cli import with_config_extras
from workers.engine.planner.plan_hardware import HARDWARE
from workers.engine.planner.plan_pd import DEFAULT_TPOT_MS, Workload, split
from workers.engine.planner.plan_proposals import with_proposals

TYPICAL_NODE = PlanInput(npu_memory_bytes=64 * GIB, npus_per_node=8, chip="910b")
TYPICAL_NPU_GB = 64


def fit_on_typical_node(facts: dict) -> dict | None:
    """{"fits", "npus", "tp", "text", "reason", "proposal"} for the typical node; None when the facts are too
    thin. `proposal` is the first thing that would fit, when the model does not (translated sentence)."""
    if not facts:
        return None
    result, proposals = with_proposals(with_config_extras(facts, facts.get("config") or {}), TYPICAL_NODE)
    if any(r.code == "facts_missing" for r in result.reasons):
        return None
    npus = result.tensor_parallel_size * result.data_parallel_size
    problem = next((r for r in result.reasons if r.level == "error"), None)
    if result.fits:
        text = _("needs %(npus)d × %(gb)d GiB at TP %(tp)d") % {
            "npus": npus,
            "gb": TYPICAL_NPU_GB,
            "tp": result.tensor_parallel_size,
        }
    else:
        text = _("does not fit one node of 8 × %(gb)d GiB") % {"gb": TYPICAL_NPU_GB}
    return {
        "fits": result.fits,
        "npus": npus,
        "tp": result.tensor_parallel_size,
        "text": text,
        "reason": reason_text(problem) if problem else "",
        "proposal": reason_text(proposals[0].reason) if proposals else "",
        "weights_gb_per_npu": round(result.weights_bytes_per_npu / GIB, 1),
    }


def reason_text(problem) -> str:
    """The planner's reason in the active language: its English template (gettext_noop'd by the planner) is a
    catalog msgid, filled after translation; the English message stands where the catalog lacks it."""
    try:
        return _(problem.template) % problem.params
    except (KeyError, TypeError, ValueError):
        return problem.message


@dataclass(frozen=True)
class Offer:
    """NPUs on offer on named nodes (the catalog's API and page read them from the inventory)."""

    names: tuple[str, ...]
    chip: str
    npus_per_node: int  # the fewest free on any of the nodes
    npu_memory_bytes: int  # the smallest of them


def advice(
    facts: dict[str, Any],
    name: str = "",
    *,
    hardware: str = "a2",
    nodes: int = 1,
    prompt_tokens: int | None = None,
    output_tokens: int | None = None,
    quantization: str | None = None,
    vllm_ascend: str | None = None,
    offer: Offer | None = None,
) -> dict[str, Any] | None:
    """The model on `nodes` nodes of `hardware` (a workers.engine.planner.plan_hardware id), or on the NPUs of
    an
    `offer`: {hardware, hardware_title, nodes, plan, proposals, pd, recipes}. `pd` is None without both
    lengths; the plan is made for sequences of their sum when given (else the model's own length). None when
    the facts are too thin to plan."""
    if not facts or not facts.get("num_layers"):
        return None
    length = None
    if prompt_tokens and output_tokens:
        length = -(-(prompt_tokens + output_tokens) // BLOCK_SIZE) * BLOCK_SIZE
    if offer is not None:
        hardware, nodes, title = "offer", len(offer.names), ", ".join(offer.names)
        chip, per_node, memory = offer.chip, offer.npus_per_node, offer.npu_memory_bytes
    else:
        shape = HARDWARE[hardware]
        title, chip, per_node, memory = shape.title, shape.chip, shape.npus_per_node, shape.npu_memory_bytes
    request = PlanInput(
        npu_memory_bytes=memory,
        npus_per_node=per_node,
        nodes=nodes,
        chip=chip,
        quantization=quantization or None,
        max_model_len=length,
    )
    facts = with_config_extras(facts, facts.get("config") or {})
    result, proposals = with_proposals(facts, request)
    pd = None
    if prompt_tokens and output_tokens:
        workload = Workload(prompt_tokens, output_tokens, DEFAULT_TPOT_MS)
        pd = split(facts, request, workload, vllm_ascend).as_dict()
    return {
        "hardware": hardware,
        "hardware_title": title,
        "nodes": nodes,
        "plan": result.as_dict(),
        "proposals": [proposal.as_dict() for proposal in proposals],
        "pd": pd,
        "recipes": [recipe["id"] for recipe in serving_for(facts, name)],
    }


def hardware_rows() -> list[dict[str, Any]]:
    """The kinds of node the advice and the recipes name, with the figures the estimates use."""
    return [
        {
            "id": shape.id,
            "title": shape.title,
            "chip": shape.chip,
            "npus_per_node": shape.npus_per_node,
            "npu_memory_gib": round(shape.npu_memory_bytes / GIB, 1),
            "tflops_16bit": round(shape.flops_16bit / 1e12),
            "tops_int8": round(shape.ops_int8 / 1e12),
            "memory_bandwidth_gbps": round(shape.memory_bandwidth / 1e9),
        }
        for shape in HARDWARE.values()
    ]
