"""Prefill and decode throughput per NPU, estimated from the model's facts and the chip's peak figures.

A roofline, written out so it can be checked by hand:

- FLOPs per token. Linear layers: 2 x the parameters a token passes through (a MoE token passes the dense
  part and `experts_per_token` of the routed experts; the input embedding is a lookup, not a matmul).
  Attention: 2 x layers x heads x (score dims + value dims) x the context it attends to. Prefill attends
  on average to half the prompt (causal); MLA prefills with its full heads (qk_nope + qk_rope, v_head_dim).
  Decode attends to the whole context so far; MLA decodes in its absorbed form over the latent
  (kv_lora_rank + qk_rope_head_dim for the scores, kv_lora_rank for the values).
- Prefill is compute-bound: seconds per token per NPU = linear FLOPs / (linear peak x ETA_COMPUTE) +
  attention FLOPs / (16-bit peak x ETA_COMPUTE). W8A8 and W4A8 weights run their matmuls at the INT8 peak.
- Decode is a batch of B sequences per engine (one DP rank of TP NPUs) stepping together. One step reads,
  on each NPU, its weights and its share of the batch's KV cache, and computes B tokens' FLOPs split over
  the engine's TP NPUs (expert parallel spreads the experts' FLOPs over all ranks, the same share):
      step = (weights per NPU + B x context x KV bytes per token per NPU) / (bandwidth x ETA_BANDWIDTH)
             + B x FLOPs per token / TP / (peak x ETA_COMPUTE)
  (no overlap of reading and computing: on the safe side). B is the largest batch whose step stays within
  the TPOT target and whose sequences fit the engine's KV cache; tokens/s per NPU = B / step / TP.

ETA_COMPUTE and ETA_BANDWIDTH are assumptions (about half the matmul peak, as prefill kernels reach, and
about 70 % of the memory peak), not fitted. The one published measurement at hand is Huawei's: 6,688
prefill and 1,943 decode tokens/s per NPU for DeepSeek-R1 in INT8 on CloudMatrix384 (arXiv 2506.12708),
with a 910C NPU being two of the dies counted here and its decode spread over hundreds of dies (EP320) that
each hold two experts. It is a sanity anchor for the order of magnitude (tests/unit/test_planner_pd.py),
not a calibration: on a node or two each die holds far more experts, which one decode step must read.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from workers.engine.planner import memory
from workers.engine.planner.plan_hardware import Hardware
from workers.engine.planner.plan_types import Plan

ETA_COMPUTE = 0.5
ETA_BANDWIDTH = 0.7


def active_params(facts: dict[str, Any]) -> int:
    """Parameters one token passes through, less the input embedding (a lookup)."""
    params = memory.param_count(facts)
    routed = memory.routed_expert_params(facts)
    moe = facts.get("moe") or {}
    if routed and moe.get("routed_experts") and moe.get("experts_per_token"):
        unused = (
            routed
            * (int(moe["routed_experts"]) - int(moe["experts_per_token"]))
            // int(moe["routed_experts"])
        )
        params -= unused
    return max(params - int(facts["vocab_size"]) * int(facts["hidden_size"]), 1)


def _attention_dims(facts: dict[str, Any], decode: bool) -> int:
    """Score plus value dimensions per head: what one context token costs one head, in MACs."""
    mla = facts.get("mla")
    if mla:
        if decode:
            return 2 * int(mla["kv_lora_rank"]) + int(mla["qk_rope_head_dim"])
        score = int(mla.get("qk_nope_head_dim") or 128) + int(mla["qk_rope_head_dim"])
        return score + int(mla.get("v_head_dim") or 128)
    return 2 * int(facts.get("head_dim") or int(facts["hidden_size"]) // int(facts["num_attention_heads"]))


def attention_flops(facts: dict[str, Any], context: int, decode: bool) -> int:
    """FLOPs of one token's attention over `context` earlier tokens."""
    heads = int(facts["num_attention_heads"])
    return 2 * int(facts["num_layers"]) * heads * _attention_dims(facts, decode) * context


def prefill_tokens_per_s(facts: dict[str, Any], hardware: Hardware, weights_label: str, prompt: int) -> float:
    """Prompt tokens one NPU prefills per second."""
    linear = 2 * active_params(facts) / (hardware.peak_for(weights_label) * ETA_COMPUTE)
    attention = attention_flops(facts, prompt // 2, decode=False) / (hardware.flops_16bit * ETA_COMPUTE)
    return 1 / (linear + attention)


@dataclass(frozen=True)
class Decode:
    tokens_per_s_per_npu: float
    batch: int  # sequences per engine
    step_s: float
    within_tpot: bool  # False when even one sequence steps slower than the target


def decode_estimate(
    facts: dict[str, Any], hardware: Hardware, result: Plan, prompt: int, output: int, tpot_s: float
) -> Decode:
    """Decode throughput of one engine laid out as `result` (its TP, weights and KV cache per NPU)."""
    label = result.weights.label if result.weights else ""
    context = prompt + output // 2  # the average sequence length while it decodes
    tp = result.tensor_parallel_size
    bandwidth = hardware.memory_bandwidth * ETA_BANDWIDTH
    fixed = result.weights_bytes_per_npu / bandwidth
    per_sequence = context * result.kv_bytes_per_token / bandwidth
    per_sequence += 2 * active_params(facts) / tp / (hardware.peak_for(label) * ETA_COMPUTE)
    per_sequence += attention_flops(facts, context, decode=True) / tp / (hardware.flops_16bit * ETA_COMPUTE)
    fits = max(result.kv_cache_tokens // max(prompt + output, 1), 1)
    within = int((tpot_s - fixed) // per_sequence) if tpot_s > fixed else 0
    batch = max(1, min(fits, within))
    step = fixed + batch * per_sequence
    return Decode(batch / step / tp, batch, step, within >= 1)
