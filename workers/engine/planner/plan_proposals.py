"""What would fit, when the model does not fit the NPUs on offer: more nodes like these, W8A8 weights, or
another Ascend shape (an A3 node, two A2 nodes, 300I Duo cards), each with its own plan's figures.

`propose` asks the planner the same question on each candidate, with the layout left to the planner (a
MoE model's fewest nodes with expert parallel, DeepSeek's DP x TP as the launch runs it), and keeps the
smallest fit of each: on the NPUs' own kind the weights as they are and, when it needs fewer NPUs, W8A8;
on each other kind of node its smallest fit. A dense model is never spread over nodes (that would need
pipeline parallel, which is not planned).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from workers.engine.planner import memory
from workers.engine.planner.memory import gib
from workers.engine.planner.plan import plan
from workers.engine.planner.plan_hardware import HARDWARE, Hardware
from workers.engine.planner.plan_layout import MAX_NODES_SEARCHED
from workers.engine.planner.plan_moe import moe_layout
from workers.engine.planner.plan_reasons import Reason, reason
from workers.engine.planner.plan_types import Plan, PlanInput

MAX_PROPOSALS = 5


@dataclass(frozen=True)
class Proposal:
    hardware: str  # a HARDWARE id, or "" for more nodes like the ones on offer
    nodes: int
    npus_per_node: int
    chip: str
    plan: Plan
    reason: Reason

    @property
    def npus(self) -> int:
        return self.plan.tensor_parallel_size * self.plan.data_parallel_size

    @property
    def expert_parallel(self) -> int:
        return self.npus if self.plan.enable_expert_parallel else 1

    def as_dict(self) -> dict[str, Any]:
        result = self.plan
        return {
            "hardware": self.hardware,
            "chip": self.chip,
            "nodes": self.nodes,
            "npus_per_node": self.npus_per_node,
            "npus": self.npus,
            "tensor_parallel_size": result.tensor_parallel_size,
            "data_parallel_size": result.data_parallel_size,
            "expert_parallel_size": self.expert_parallel,
            "quantization": result.quantization,
            "weights_label": result.weights.label if result.weights else None,
            "weights_gb_per_npu": round(result.weights_bytes_per_npu / memory.GIB, 2),
            "kv_cache_gb_per_npu": round(max(result.memory.kv_cache_bytes, 0) / memory.GIB, 2)
            if result.memory
            else 0,
            "kv_cache_tokens": result.kv_cache_tokens,
            "max_model_len": result.max_model_len,
            "reason": self.reason.as_dict(),
        }


def propose(facts: dict[str, Any], request: PlanInput) -> list[Proposal]:
    """Up to MAX_PROPOSALS shapes the model fits, the NPUs' own kind first; [] when the facts are too thin."""
    if not facts.get("num_layers"):
        return []
    open_layout = replace(request, tensor_parallel_size=None, data_parallel_size=None, nodes=1)
    shapes: list[tuple[Hardware | None, PlanInput]] = [(None, open_layout)]
    for other in HARDWARE.values():
        if _same_shape(other, request):
            continue
        shape = replace(
            open_layout,
            chip=other.chip,
            npus_per_node=other.npus_per_node,
            npu_memory_bytes=other.npu_memory_bytes,
        )
        shapes.append((other, shape))
    quantizations = [request.quantization]
    if request.quantization is None and not memory.is_quantized(facts):
        quantizations.append("ascend")
    found: list[Proposal] = []
    for hardware, shape in shapes:
        fitting = [_fewest_nodes(facts, replace(shape, quantization=q), hardware) for q in quantizations]
        kept = [proposal for proposal in fitting if proposal is not None]
        if hardware is not None:
            # Another kind of node: its smallest fit only (the weights as they are on a tie).
            kept = sorted(kept, key=lambda proposal: proposal.npus)[:1]
        elif len(kept) == 2 and kept[1].npus >= kept[0].npus:
            kept = kept[:1]  # W8A8 on these NPUs only when it needs fewer of them
        found.extend(kept)
    return found[:MAX_PROPOSALS]


def _same_shape(hardware: Hardware, request: PlanInput) -> bool:
    return (
        hardware.chip == request.chip
        and hardware.npus_per_node == request.npus_per_node
        and abs(hardware.npu_memory_bytes - request.npu_memory_bytes) < memory.GIB
    )


def _fewest_nodes(facts: dict[str, Any], shape: PlanInput, hardware: Hardware | None) -> Proposal | None:
    spreads = bool(facts.get("moe"))  # only expert parallel spreads a model over nodes here
    for nodes in range(1, (MAX_NODES_SEARCHED if spreads else 1) + 1):
        request = replace(shape, nodes=nodes)
        result = plan(facts, request)
        if not result.fits:
            continue
        layout = moe_layout(facts, request)
        if layout is not None:  # DeepSeek runs as the launch lays it out: DP x TP with expert parallel
            tp, dp = layout
            launched = plan(facts, replace(request, tensor_parallel_size=tp, data_parallel_size=dp))
            result = launched if launched.fits else result
        return _proposal(hardware, request, result)
    return None


def _proposal(hardware: Hardware | None, request: PlanInput, result: Plan) -> Proposal:
    world = result.tensor_parallel_size * result.data_parallel_size
    nodes = max(1, -(-world // request.npus_per_node))
    params = {
        "nodes": nodes,
        "npus": world,
        "tp": result.tensor_parallel_size,
        "dp": result.data_parallel_size,
        "ep": world if result.enable_expert_parallel else 1,
        "label": result.weights.label if result.weights else "",
        "weights": gib(result.weights_bytes_per_npu),
        "kv": gib(max(result.memory.kv_cache_bytes, 0) if result.memory else 0),
        "tokens": result.kv_cache_tokens,
    }
    if hardware is None:
        text = reason("proposal_here", "info", per_node=request.npus_per_node, **params)
    else:
        text = reason("proposal_hardware", "info", hardware=hardware.title, **params)
    return Proposal(hardware.id if hardware else "", nodes, request.npus_per_node, request.chip, result, text)


def with_proposals(facts: dict[str, Any], request: PlanInput) -> tuple[Plan, list[Proposal]]:
    """The plan, and what would fit when it does not."""
    result = plan(facts, request)
    return result, ([] if result.fits else propose(facts, request))
