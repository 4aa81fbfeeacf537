"""The prefill/decode split: P:D counts and each role's TP / DP / EP from the model's facts, the NPUs on offer
and the expected prompt and output lengths, or why disaggregation is not worth it here.

How the split is chosen (the throughputs are workers.engine.planner.plan_throughput's estimates):
1. One instance of the model is the planner's smallest layout for sequences of prompt + output tokens (a
   MoE model's fewest nodes with expert parallel, DeepSeek's DP x TP as the launch runs it). Prefill
   instances are that size; a decode instance of a MoE model may span more nodes, which spreads the experts
   thinner, so each decode step reads fewer weights per NPU.
2. A request costs prompt / prefill rate NPU-seconds of prefill and output / decode rate of decode. For
   each decode size and each P, D with P x prefill NPUs + D x decode NPUs within the NPUs on offer, the
   requests/s it sustains is the smaller of the two pools' rates; the split with the most, then the fewest
   NPUs, wins.
3. Not worth it (said with the reason, the split still shown where one fits): the model fits one NPU (a
   replica prefills and decodes on its own NPU), every NPU on offer is on one node (each role would get a
   part of one node), or prompts are short (under SHORT_PROMPT_TOKENS, or one prompt prefills on an
   instance within one TPOT, so a colocated engine's chunked prefill hides it from decoding).
EPLB is added per role where the installed vllm-ascend recommends it and its redundant experts fit
(workers.engine.planner.plan_moe.plan_with_eplb).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from workers.engine.planner import memory
from workers.engine.planner.memory import gib
from workers.engine.planner.plan import plan
from workers.engine.planner.plan_hardware import for_chip
from workers.engine.planner.plan_moe import moe_layout, plan_with_eplb
from workers.engine.planner.plan_reasons import Reason, reason
from workers.engine.planner.plan_throughput import decode_estimate, prefill_tokens_per_s
from workers.engine.planner.plan_types import Plan, PlanInput

SHORT_PROMPT_TOKENS = 1024
DEFAULT_TPOT_MS = 50  # the TPOT bound of Huawei's CloudMatrix384 decode figure


@dataclass(frozen=True)
class Workload:
    prompt_tokens: int
    output_tokens: int
    tpot_ms: int = DEFAULT_TPOT_MS


@dataclass(frozen=True)
class Role:
    replicas: int
    plan: Plan
    eplb: bool = False

    @property
    def npus(self) -> int:
        return self.plan.tensor_parallel_size * self.plan.data_parallel_size

    def as_dict(self) -> dict[str, Any]:
        return {
            "replicas": self.replicas,
            "tensor_parallel_size": self.plan.tensor_parallel_size,
            "data_parallel_size": self.plan.data_parallel_size,
            "expert_parallel_size": self.npus if self.plan.enable_expert_parallel else 1,
            "enable_expert_parallel": self.plan.enable_expert_parallel,
            "npus_per_replica": self.npus,
            "nodes_per_replica": self.plan.nodes,
            "eplb": self.eplb,
            "max_model_len": self.plan.max_model_len,
        }


@dataclass
class Split:
    worth_it: bool
    reasons: list[Reason] = field(default_factory=list)
    prefill: Role | None = None
    decode: Role | None = None
    estimates: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {
            "worth_it": self.worth_it,
            "prefill": self.prefill.as_dict() if self.prefill else None,
            "decode": self.decode.as_dict() if self.decode else None,
            "estimates": self.estimates,
            "reasons": [item.as_dict() for item in self.reasons],
        }


def instance(facts: dict[str, Any], request: PlanInput, nodes: int) -> Plan | None:
    """The smallest layout within `nodes` nodes (DeepSeek's DP x TP over them when it spans them)."""
    for count in range(1, nodes + 1):
        ask = replace(request, nodes=count, tensor_parallel_size=None, data_parallel_size=None)
        result = plan(facts, ask)
        if not result.fits:
            continue
        layout = moe_layout(facts, ask)
        if layout is not None:
            laid_out = plan(facts, replace(ask, tensor_parallel_size=layout[0], data_parallel_size=layout[1]))
            result = laid_out if laid_out.fits else result
        return result
    return None


def _spread(facts: dict[str, Any], request: PlanInput, nodes: int) -> Plan | None:
    """A MoE instance over exactly `nodes` nodes, for decode: DP x TP with expert parallel."""
    ask = replace(request, nodes=nodes, tensor_parallel_size=None, data_parallel_size=None)
    layout = moe_layout(facts, ask)
    if layout is None:
        return None
    result = plan(facts, replace(ask, tensor_parallel_size=layout[0], data_parallel_size=layout[1]))
    return result if result.fits else None


def split(
    facts: dict[str, Any], request: PlanInput, workload: Workload, vllm_ascend: str | None = None
) -> Split:
    """The P:D proposal for `workload` on the NPUs of `request` (its TP / DP are left to the planner)."""
    hardware = for_chip(request.chip)
    length = workload.prompt_tokens + workload.output_tokens
    sized = replace(request, max_model_len=-(-length // memory.BLOCK_SIZE) * memory.BLOCK_SIZE)
    smallest = instance(facts, sized, request.nodes)
    if hardware is None:
        return Split(False, [reason("pd_no_chip_figures", "info", chip=request.chip)])
    if smallest is None:
        return Split(False, [r for r in plan(facts, sized).reasons if r.level == "error"])
    total = request.npus_per_node * request.nodes
    label = smallest.weights.label if smallest.weights else ""
    prefill_rate = prefill_tokens_per_s(facts, hardware, label, workload.prompt_tokens)
    decode_sizes = [smallest]
    if smallest.enable_expert_parallel or facts.get("moe"):
        first = max(smallest.nodes, 1)
        wider = range(first + 1, request.nodes - first + 1)  # leave the prefill instance its nodes
        decode_sizes += [p for n in wider if (p := _spread(facts, sized, n))]
    # Mooncake's connector refuses a decode TP above the prefill TP in every vllm-ascend release (launch
    # matrix, kv_connectors mooncake `split`): such a decode layout is never proposed.
    decode_sizes = [p for p in decode_sizes if p.tensor_parallel_size <= smallest.tensor_parallel_size]
    tpot = workload.tpot_ms / 1000
    best: tuple[float, int, int, int, Plan] | None = None
    smallest_npus = smallest.tensor_parallel_size * smallest.data_parallel_size
    for decode_plan in decode_sizes:
        per_decode = decode_plan.tensor_parallel_size * decode_plan.data_parallel_size
        rate = decode_estimate(
            facts, hardware, decode_plan, workload.prompt_tokens, workload.output_tokens, tpot
        )
        for p_count in range(1, total // smallest_npus + 1):
            d_count = (total - p_count * smallest_npus) // per_decode
            if d_count < 1:
                break
            prefill_rps = p_count * smallest_npus * prefill_rate / workload.prompt_tokens
            decode_rps = d_count * per_decode * rate.tokens_per_s_per_npu / workload.output_tokens
            served = min(prefill_rps, decode_rps)
            used = p_count * smallest_npus + d_count * per_decode
            if best is None or (served, -used) > (best[0], -best[1]):
                best = (served, used, p_count, d_count, decode_plan)
    decode_rate = decode_estimate(
        facts, hardware, best[4] if best else smallest, workload.prompt_tokens, workload.output_tokens, tpot
    )
    share = _prefill_share(workload, prefill_rate, decode_rate.tokens_per_s_per_npu)
    estimates = {
        "prefill_tokens_per_s_per_npu": round(prefill_rate),
        "decode_tokens_per_s_per_npu": round(decode_rate.tokens_per_s_per_npu),
        "decode_batch_per_engine": decode_rate.batch,
        "decode_within_tpot": decode_rate.within_tpot,
        "prefill_share": round(share, 3),
    }
    reasons = [
        reason(
            "pd_estimate",
            "info",
            prefill=round(prefill_rate),
            decode=round(decode_rate.tokens_per_s_per_npu),
            batch=decode_rate.batch,
            tpot=workload.tpot_ms,
            prompt=workload.prompt_tokens,
            output=workload.output_tokens,
            share=round(100 * share),
        )
    ]
    if not decode_rate.within_tpot:
        reasons.append(
            reason(
                "pd_tpot_missed",
                "warning",
                step=round(1000 * decode_rate.step_s),
                tpot=workload.tpot_ms,
                weights=gib((best[4] if best else smallest).weights_bytes_per_npu),
            )
        )
    if facts.get("moe") and facts.get("mla"):
        reasons.append(reason("pd_sanity_anchor", "info"))
    against = _not_worth_it(smallest, request, workload, prefill_rate, label)
    if best is None:
        against.append(reason("pd_no_room", "info", needed=2 * smallest_npus, npus=total))
        return Split(False, [*against, *reasons], estimates=estimates)
    served, used, p_count, d_count, decode_plan = best
    prefill, decode = (
        _role(facts, sized, smallest, p_count, vllm_ascend),
        _role(facts, sized, decode_plan, d_count, vllm_ascend),
    )
    pools = (
        p_count * smallest_npus * prefill_rate / workload.prompt_tokens,
        d_count * decode.npus * decode_rate.tokens_per_s_per_npu / workload.output_tokens,
    )
    estimates["requests_per_s"] = round(served, 2)
    reasons.insert(0, _split_reason(prefill, decode, total, served, pools))
    return Split(
        not against, [*against, *reasons, *eplb_reasons(prefill, decode)], prefill, decode, estimates
    )


def _prefill_share(workload: Workload, prefill_rate: float, decode_rate: float) -> float:
    prefill_s = workload.prompt_tokens / prefill_rate
    decode_s = workload.output_tokens / max(decode_rate, 1e-9)
    return prefill_s / (prefill_s + decode_s)


def _not_worth_it(
    smallest: Plan, request: PlanInput, workload: Workload, prefill_rate: float, label: str
) -> list[Reason]:
    reasons = []
    npus = smallest.tensor_parallel_size * smallest.data_parallel_size
    if npus == 1:
        weights = gib(smallest.weights.total_bytes if smallest.weights else 0)
        reasons.append(reason("pd_not_worth_small_model", "info", weights=weights, label=label))
    if request.nodes == 1:
        reasons.append(reason("pd_not_worth_one_node", "info", npus=request.npus_per_node))
    # A prompt whose prefill takes less than one decode step stalls a colocated engine's decoding by less
    # than one TPOT: chunked prefill absorbs it, and there is no interference left to take away.
    prefill_ms = 1000 * workload.prompt_tokens / (prefill_rate * npus)
    if workload.prompt_tokens < SHORT_PROMPT_TOKENS or prefill_ms < workload.tpot_ms:
        reasons.append(
            reason(
                "pd_not_worth_short_prompts",
                "info",
                prompt=workload.prompt_tokens,
                prefill_ms=round(prefill_ms),
                tpot=workload.tpot_ms,
            )
        )
    return reasons


def _role(
    facts: dict[str, Any], request: PlanInput, laid_out: Plan, replicas: int, vllm_ascend: str | None
) -> Role:
    """The role's plan with EPLB where this vllm-ascend recommends it and it fits."""
    ask = replace(
        request,
        nodes=laid_out.nodes,
        tensor_parallel_size=laid_out.tensor_parallel_size,
        data_parallel_size=laid_out.data_parallel_size,
    )
    result, eplb, _reasons = plan_with_eplb(facts, ask, vllm_ascend)
    return Role(replicas, result if eplb else laid_out, eplb is not None)


def eplb_reasons(prefill: Role, decode: Role) -> list[Reason]:
    """Which roles run EPLB, with their redundant experts."""
    return [
        reason(code, "info", redundant=role.plan.redundant_experts)
        for code, role in (("pd_eplb_prefill", prefill), ("pd_eplb_decode", decode))
        if role.eplb
    ]


def _split_reason(
    prefill: Role, decode: Role, total: int, served: float, pools: tuple[float, float]
) -> Reason:
    def ep(role: Role) -> int:
        return role.npus if role.plan.enable_expert_parallel else 1

    return reason(
        "pd_split",
        "info",
        prefill=prefill.replicas,
        p_tp=prefill.plan.tensor_parallel_size,
        p_dp=prefill.plan.data_parallel_size,
        p_ep=ep(prefill),
        p_npus=prefill.npus,
        decode=decode.replicas,
        d_tp=decode.plan.tensor_parallel_size,
        d_dp=decode.plan.data_parallel_size,
        d_ep=ep(decode),
        d_npus=decode.npus,
        npus=total,
        rate=served,
        balance=round(100 * min(pools) / max(pools)) if max(pools) else 0,
    )
