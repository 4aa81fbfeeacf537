"""MoE launches as vllm-ascend's DeepSeek recipes run them: DP x TP with expert parallel, EPLB, MTP drafts.

`moe_layout` spreads an MLA MoE model (DeepSeek V2 / V3 / R1) over exactly the chosen NPUs as DP x TP with
expert parallel, with the largest TP that keeps 32, 64 or 128 attention heads per NPU (MLA's graph-mode
kernel accepts nothing else): DeepSeek's 128 heads give TP 4, the "dp4tp4 rather than dp2tp8" of the
DeepSeek-V3.1 tutorial, on one A3 node as on two A2 nodes. `plan_with_eplb` adds dynamic expert load
balancing where the installed vllm-ascend recommends it and the memory allows its redundant experts.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from workers.engine.launch.launch_matrix import decode_graph_mode, eplb_facts, mtp_method
from workers.engine.launch.recipes import DEEPSEEK
from workers.engine.planner.memory import gib
from workers.engine.planner.plan import MLA_GRAPH_HEADS_PER_NPU, Plan, PlanInput, plan, settle
from workers.engine.planner.plan_layout import TENSOR_PARALLEL_CHOICES, evaluate
from workers.engine.planner.plan_reasons import Reason, reason


def moe_layout(facts: dict[str, Any], request: PlanInput) -> tuple[int, int] | None:
    """(TP, DP) over all npus_per_node x nodes NPUs for an MLA MoE model in graph mode, or None when the
    model is not one, graph mode is off, or no such layout holds a full sequence."""
    if not (facts.get("moe") and facts.get("mla")) or request.enforce_eager or request.chip == "310p":
        return None
    world = request.npus_per_node * request.nodes
    heads = int(facts["num_attention_heads"])
    settings = settle(facts, request, [])
    best = None
    for tp in TENSOR_PARALLEL_CHOICES:
        if tp > request.npus_per_node or world % tp or heads % tp:
            continue
        if heads // tp not in MLA_GRAPH_HEADS_PER_NPU:
            continue
        dp = world // tp
        layout = evaluate(facts, request, settings, tp, dp, dp > 1)
        if not layout.broken_rules and layout.tokens >= settings.max_model_len:
            best = (tp, dp)  # keep the largest TP that fits: less dense weight copied, more KV cache
    return best


@dataclass(frozen=True)
class Eplb:
    env: dict[str, str]
    additional_config: dict[str, Any]
    redundant_experts: int


def plan_with_eplb(
    facts: dict[str, Any], request: PlanInput, vllm_ascend: str | None
) -> tuple[Plan, Eplb | None, list[Reason]]:
    """The plan, with EPLB's redundant experts when this version recommends EPLB and they fit."""
    first = plan(facts, request)
    facts_eplb = eplb_facts(vllm_ascend)
    if not (first.fits and first.enable_expert_parallel and facts_eplb):
        return first, None, []
    label = first.weights.label if first.weights else ""
    if any(label.upper().startswith(prefix) for prefix in facts_eplb["unsupported_quantization"]):
        return first, None, [reason("eplb_unsupported_weights", "info", label=label)]
    world = first.tensor_parallel_size * first.data_parallel_size
    with_copies = plan(facts, replace(request, redundant_experts=world))
    per_npu = gib(with_copies.weights_bytes_per_npu - first.weights_bytes_per_npu)
    if not with_copies.fits:
        return first, None, [reason("eplb_no_room", "info", redundant=world, per_npu=per_npu)]
    config = {
        "eplb_config": {
            "dynamic_eplb": True,
            "eplb_policy_type": facts_eplb["policy_type"],
            "num_redundant_experts": world,
        }
    }
    eplb = Eplb(dict(facts_eplb["env"]), config, world)
    version = vllm_ascend or "?"
    return with_copies, eplb, [reason("eplb_on", "info", version=version, redundant=world, per_npu=per_npu)]


def plan_launch(
    facts: dict[str, Any], request: PlanInput, vllm_ascend: str | None, choose_layout: bool
) -> tuple[Plan, Eplb | None, list[Reason]]:
    """The plan as the launch runs it: an MLA MoE model laid out by `moe_layout` when the user left TP
    and DP to the planner (`choose_layout`), then EPLB where it applies; the extra reasons say why."""
    reasons = []
    layout = moe_layout(facts, request) if choose_layout else None
    if layout:
        tp, dp = layout
        request = replace(request, tensor_parallel_size=tp, data_parallel_size=dp)
        heads = int(facts["num_attention_heads"]) // tp
        reasons.append(reason("moe_layout", "info", world=tp * dp, dp=dp, tp=tp, heads=heads))
    result, eplb, eplb_reasons = plan_with_eplb(facts, request, vllm_ascend)
    return result, eplb, reasons + eplb_reasons


def mtp_config(vllm_ascend: str | None, tokens: int) -> dict[str, Any]:
    """--speculative-config for DeepSeek's MTP layers with `tokens` draft tokens ({} when off)."""
    if not tokens:
        return {}
    return {"method": mtp_method(vllm_ascend), "num_speculative_tokens": tokens}


def graph_config(
    vllm_ascend: str | None, family: str | None, eager: bool
) -> tuple[dict[str, Any], list[Reason]]:
    """--compilation-config's graph mode for the model family on this version, as the tutorials set it."""
    if eager or family != DEEPSEEK:
        return {}, []
    mode = decode_graph_mode(vllm_ascend, family)
    if mode is None:
        return {}, []
    return {"cudagraph_mode": mode}, [reason("decode_graph_mode", "info", mode=mode, version=vllm_ascend)]
