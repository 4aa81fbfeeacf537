"""The sentences a plan ends with: its summary, why it does not fit, what its extras take from each NPU.

Split from workers.engine.planner.plan, which decides the layout; these only explain one.
"""

from __future__ import annotations

from workers.engine.planner import memory
from workers.engine.planner.memory import gib
from workers.engine.planner.plan_layout import Layout
from workers.engine.planner.plan_reasons import Reason, reason
from workers.engine.planner.plan_types import PlanInput, Settings


def memory_notes(request: PlanInput, settings: Settings, layout: Layout) -> list[Reason]:
    """What the MTP drafts and HCCL's buffers take from each NPU, when they take anything."""
    notes = []
    if settings.draft is not None and settings.draft_layers:
        world = layout.tensor_parallel * layout.data_parallel
        per_npu = settings.draft.per_npu(layout.tensor_parallel, world if layout.expert_parallel else None)
        params = {"tokens": request.mtp_tokens, "layers": settings.draft_layers, "weights": gib(per_npu)}
        notes.append(reason("mtp_draft", "info", **params))
    if layout.collective_bytes:
        one = memory.hccl_bytes(request.hccl_buffsize_mb, 1)
        count = layout.collective_bytes // one
        size = gib(layout.collective_bytes)
        notes.append(reason("hccl_buffers", "info", count=count, mb=request.hccl_buffsize_mb, size=size))
    return notes


def needs_more_nodes(request: PlanInput, settings: Settings, layout: Layout) -> Reason:
    return reason(
        "needs_more_nodes",
        "error",
        weights=gib(settings.weights.total_bytes),
        label=settings.weights.label,
        have=request.nodes,
        per_node=request.npus_per_node,
        npu_gib=gib(request.npu_memory_bytes),
        util=request.gpu_memory_utilization,
        nodes=layout.nodes,
        tp=layout.tensor_parallel,
        dp=layout.data_parallel,
        kv=gib(layout.memory.kv_cache_bytes),
        tokens=layout.tokens,
    )


def kv_too_small(settings: Settings, layout: Layout) -> Reason:
    return reason(
        "kv_too_small",
        "error",
        tp=layout.tensor_parallel,
        kv=gib(max(layout.memory.kv_cache_bytes, 0)),
        tokens=layout.tokens,
        max_len=settings.max_model_len,
    )


def summary(request: PlanInput, settings: Settings, layout: Layout) -> list[Reason]:
    reasons = [
        reason(
            "plan",
            "info",
            tp=layout.tensor_parallel,
            dp=layout.data_parallel,
            nodes=layout.nodes,
            weights=gib(layout.weights_per_npu),
            label=settings.weights.label,
            kv=gib(layout.memory.kv_cache_bytes),
            tokens=layout.tokens,
            seqs=layout.tokens // settings.max_model_len,
            max_len=settings.max_model_len,
        )
    ]
    if layout.expert_parallel:
        reasons.append(reason("expert_parallel", "info", world=layout.tensor_parallel * layout.data_parallel))
    idle = request.npus_per_node * request.nodes - layout.tensor_parallel * layout.data_parallel
    if idle > 0:
        reasons.append(reason("npus_left_idle", "info", idle=idle))
    return reasons
