"""The planner's layouts: one TP x DP candidate's memory and the rules it breaks (`evaluate`), and the search
for the one to recommend (`choose_layout`): the smallest power-of-two TP within one node that leaves room for
a max-model-len sequence, else the fewest nodes a MoE model fits on with expert parallel, else the closest
miss. workers.engine.planner.plan explains the outcome; workers.engine.planner.plan_moe lays out
DeepSeek-style models.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from workers.engine.planner import memory
from workers.engine.planner.memory import NpuMemory
from workers.engine.planner.plan_reasons import Reason, reason
from workers.engine.planner.plan_types import PlanInput, Settings

TENSOR_PARALLEL_CHOICES = (1, 2, 4, 8, 16, 32)
MAX_NODES_SEARCHED = 8


@dataclass(frozen=True)
class Layout:
    """One candidate TP x DP layout and what it leaves for the KV cache."""

    tensor_parallel: int
    data_parallel: int
    nodes: int
    expert_parallel: bool
    weights_per_npu: int
    kv_bytes_per_token: int
    memory: NpuMemory
    tokens: int
    broken_rules: tuple[Reason, ...]
    collective_bytes: int = 0

    @property
    def weights_fit(self) -> bool:
        return self.memory.kv_cache_bytes > 0


def broken_rules(
    facts: dict[str, Any], request: PlanInput, tensor_parallel: int, data_parallel: int
) -> list[Reason]:
    """Ascend and vLLM rules a TP x DP layout breaks; empty when it is allowed."""
    broken = []
    heads = int(facts["num_attention_heads"])
    kv_heads = int(facts.get("num_kv_heads") or heads)
    if heads % tensor_parallel:
        broken.append(reason("tp_does_not_divide_heads", "error", tp=tensor_parallel, heads=heads))
    elif not facts.get("mla") and kv_heads % tensor_parallel and tensor_parallel % kv_heads:
        # vLLM splits KV heads over TP, or replicates them when TP is a multiple of their count.
        broken.append(reason("tp_does_not_divide_kv_heads", "error", tp=tensor_parallel, kv_heads=kv_heads))
    if tensor_parallel > request.npus_per_node:
        broken.append(reason("tp_exceeds_node", "error", tp=tensor_parallel, per_node=request.npus_per_node))
    available = request.npus_per_node * request.nodes
    needed = tensor_parallel * data_parallel
    if needed > available:
        broken.append(
            reason(
                "not_enough_npus",
                "error",
                tp=tensor_parallel,
                dp=data_parallel,
                needed=needed,
                available=available,
            )
        )
    return broken


def evaluate(
    facts: dict[str, Any],
    request: PlanInput,
    settings: Settings,
    tensor_parallel: int,
    data_parallel: int,
    expert_parallel: bool,
) -> Layout:
    """Memory of one layout; expert_parallel spreads routed experts over all TP x DP NPUs."""
    world = tensor_parallel * data_parallel
    served = memory.combined(settings.weights, settings.draft) if settings.draft else settings.weights
    weights = served.per_npu(tensor_parallel, world if expert_parallel else None)
    per_token = memory.kv_bytes_per_token(facts, tensor_parallel, settings.dtype, settings.draft_layers)
    communicators = memory.hccl_communicators(tensor_parallel, data_parallel, expert_parallel)
    collective = memory.hccl_bytes(request.hccl_buffsize_mb, communicators)
    npu = memory.npu_memory(
        request.npu_memory_bytes, request.chip, request.gpu_memory_utilization, weights, collective
    )
    return Layout(
        tensor_parallel=tensor_parallel,
        data_parallel=data_parallel,
        nodes=max(1, -(-world // request.npus_per_node)),
        expert_parallel=expert_parallel,
        weights_per_npu=weights,
        kv_bytes_per_token=per_token,
        memory=npu,
        tokens=memory.kv_tokens(npu.kv_cache_bytes, per_token),
        broken_rules=tuple(broken_rules(facts, request, tensor_parallel, data_parallel)),
        collective_bytes=collective,
    )


def choose_layout(facts: dict[str, Any], request: PlanInput, settings: Settings) -> Layout:
    data_parallel = request.data_parallel_size or 1
    if request.tensor_parallel_size:
        expert_parallel = bool(settings.weights.expert_bytes) and data_parallel > 1
        return evaluate(
            facts, request, settings, request.tensor_parallel_size, data_parallel, expert_parallel
        )
    in_node = [
        evaluate(facts, request, settings, tp, data_parallel, False)
        for tp in TENSOR_PARALLEL_CHOICES
        if tp <= request.npus_per_node
    ]
    allowed = [layout for layout in in_node if not layout.broken_rules]
    for layout in allowed:
        if layout.tokens >= settings.max_model_len:
            return layout
    spread = _expert_parallel_layout(facts, request, settings)
    if spread is not None:
        return spread
    for layout in allowed:
        if layout.weights_fit:
            return layout  # the weights fit, one full-length sequence does not: say so
    # Nothing fits: show the layout that comes closest (the largest allowed TP).
    return allowed[-1] if allowed else in_node[-1]


def _expert_parallel_layout(facts: dict[str, Any], request: PlanInput, settings: Settings) -> Layout | None:
    """The fewest nodes (up to MAX_NODES_SEARCHED) over which a MoE model fits with DP x TP and EP."""
    if not settings.weights.expert_bytes or request.data_parallel_size:
        return None
    for nodes in range(2, max(request.nodes, MAX_NODES_SEARCHED) + 1):
        world = nodes * request.npus_per_node
        for tp in TENSOR_PARALLEL_CHOICES:
            if tp > request.npus_per_node:
                break
            layout = evaluate(facts, request, settings, tp, world // tp, True)
            rules_ok = all(rule.code == "not_enough_npus" for rule in layout.broken_rules)
            if rules_ok and layout.tokens >= settings.max_model_len:
                return layout
    return None
