"""Ascend-aware memory planner: will this model run on these NPUs, and with which vLLM settings?

Pure functions, shared by the panel wizard, the API and the CLI:

    python -m workers.engine.planner.plan_cli MODEL_DIR --npu-memory-gb 64 --npus-per-node 8 [--nodes 2]
        [--quantization ascend] [--dtype bfloat16] [--max-model-len 32768]
        [--gpu-memory-utilization 0.9] [--chip 910b|310p|a3]
        [--prompt-tokens 4096 --output-tokens 1024 [--tpot-ms 50] [--vllm-ascend 0.23.0]]

Units: "GB" on the command line and in the JSON ("weights_gb_per_npu") are GiB (2**30 bytes), the unit
npu-smi (its "MB" are MiB: 64 GB of HBM shows as 65536 MB) and vLLM's logs use. Give the planner the
NPU memory from the inventory (npu-smi's HBM or memory total), not from a data sheet.

Memory model per NPU (see workers.engine.planner.memory for the constants and how they were checked):
    total = driver share + [ utilization x (total - driver share) ] + free
    vLLM's share = weights / TP (routed experts / (TP x DP) with expert parallel) + workspace + KV cache
KV cache per token: layers x KV heads per NPU x head_dim x 2 x dtype bytes, where TP > KV heads
replicates the heads (one per NPU); MLA: (kv_lora_rank + qk_rope_head_dim) x layers x dtype bytes on every
NPU. Tokens are counted in whole blocks of 128.

The recommended layout is the smallest power-of-two TP within one node that obeys the Ascend rules and
leaves room for at least one max-model-len sequence. A model that needs more than one node is planned
only for MoE models, as data parallel with expert parallel (routed experts spread over every NPU), the
layout vllm-ascend documents for DeepSeek; dense models would need pipeline parallel, which this planner
does not plan. Each outcome carries reasons: a machine code, a level and a human sentence.

Around this plan: workers.engine.planner.plan_proposals says what would fit when it does not (more nodes,
W8A8, another kind of node), workers.engine.planner.plan_pd picks the prefill/decode split for expected prompt
and output lengths (its throughput estimates are workers.engine.planner.plan_throughput's),
workers.engine.planner.plan_moe lays out
DeepSeek-style models and EPLB.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from workers.engine.planner import memory
from workers.engine.planner.memory import GIB, gib
from workers.engine.planner.plan_explain import kv_too_small, memory_notes, needs_more_nodes, summary
from workers.engine.planner.plan_layout import Layout, choose_layout
from workers.engine.planner.plan_reasons import Reason, reason
from workers.engine.planner.plan_types import CHIPS, Plan, PlanInput, PlanInputError, Settings

# vllm-ascend's MLA attention kernel in graph mode accepts only these heads per NPU (after the TP split).
MLA_GRAPH_HEADS_PER_NPU = (32, 64, 128)
REQUIRED_FACTS = ("num_layers", "hidden_size", "num_attention_heads", "vocab_size")


def plan(facts: dict[str, Any], request: PlanInput) -> Plan:
    """Plan `facts` (from workers.models.inspect.inspect_model) onto the NPUs described by `request`."""
    check_input(request)
    missing = [name for name in REQUIRED_FACTS if not facts.get(name)]
    if not facts.get("weights_bytes") and not facts.get("params"):
        missing.append("weights_bytes")
    if missing:
        return _empty_plan(request, [reason("facts_missing", "error", fields=", ".join(missing))])
    reasons: list[Reason] = []
    settings = settle(facts, request, reasons)
    layout = choose_layout(facts, request, settings)
    eager = _eager(facts, request, layout.tensor_parallel, reasons)
    fits = not layout.broken_rules and layout.tokens >= settings.max_model_len
    if request.mtp_tokens and not settings.draft_layers:
        reasons.append(reason("mtp_unsupported", "error"))
        fits = False
    if layout.nodes > request.nodes and not request.tensor_parallel_size:  # the planner spread it wider
        reasons.append(needs_more_nodes(request, settings, layout))
        reasons.extend(r for r in layout.broken_rules if r.code != "not_enough_npus")
        reasons.extend(_as_w8a8(facts, request, settings))
    elif layout.broken_rules:
        reasons.extend(layout.broken_rules)
    elif not layout.weights_fit:
        reasons.extend(_weights_do_not_fit(facts, request, settings, layout))
    elif not fits:
        reasons.append(kv_too_small(settings, layout))
    else:
        reasons.extend(summary(request, settings, layout))
    if fits:
        reasons.extend(memory_notes(request, settings, layout))
    return Plan(
        fits=fits,
        tensor_parallel_size=layout.tensor_parallel,
        data_parallel_size=layout.data_parallel,
        nodes=layout.nodes,
        enable_expert_parallel=layout.expert_parallel,
        dtype=settings.dtype,
        quantization=settings.quantization,
        enforce_eager=eager,
        max_model_len=settings.max_model_len,
        gpu_memory_utilization=request.gpu_memory_utilization,
        block_size=memory.BLOCK_SIZE,
        weights=settings.weights,
        weights_bytes_per_npu=layout.weights_per_npu,
        kv_bytes_per_token=layout.kv_bytes_per_token,
        kv_cache_tokens=layout.tokens,
        max_concurrent_seqs=layout.tokens // settings.max_model_len,
        memory=layout.memory,
        reasons=reasons,
        mtp_tokens=request.mtp_tokens,
        redundant_experts=request.redundant_experts,
        hccl_bytes_per_npu=layout.collective_bytes,
    )


def check_input(request: PlanInput) -> None:
    """Raise PlanInputError naming every field that is out of range."""
    problems = []
    if request.chip not in CHIPS:
        problems.append(f"chip must be one of {', '.join(CHIPS)}; got {request.chip!r}")
    if request.npu_memory_bytes < 4 * GIB:
        problems.append(f"npu_memory_bytes must be the NPU's memory in bytes; got {request.npu_memory_bytes}")
    if request.npus_per_node < 1 or request.nodes < 1:
        problems.append("npus_per_node and nodes must be at least 1")
    if not 0 < request.gpu_memory_utilization <= 1:
        problems.append(f"gpu_memory_utilization must be in (0, 1]; got {request.gpu_memory_utilization}")
    if request.dtype not in ("auto", *memory.DTYPE_BYTES):
        problems.append(f"dtype must be auto, bfloat16, float16 or float32; got {request.dtype!r}")
    if request.quantization not in (None, "ascend"):
        problems.append(f"quantization must be empty or 'ascend'; got {request.quantization!r}")
    if request.hccl_buffsize_mb < 1:
        problems.append(f"hccl_buffsize_mb must be at least 1; got {request.hccl_buffsize_mb}")
    if request.mtp_tokens < 0 or request.redundant_experts < 0:
        problems.append("mtp_tokens and redundant_experts must be 0 or more")
    for name in ("max_model_len", "tensor_parallel_size", "data_parallel_size"):
        value = getattr(request, name)
        if value is not None and value < 1:
            problems.append(f"{name} must be at least 1; got {value}")
    if problems:
        raise PlanInputError("; ".join(problems))


def settle(facts: dict[str, Any], request: PlanInput, reasons: list[Reason]) -> Settings:
    dtype = _dtype(facts, request, reasons)
    quantization = request.quantization
    if memory.is_quantized(facts):
        label = str(facts["quantization"])
        # msModelSlim types are W8A8, W8A8_DYNAMIC, W4A8_DYNAMIC, ...; anything else is foreign.
        if label.upper().startswith("W"):
            if quantization is None:
                reasons.append(reason("quantized_checkpoint", "info", label=label))
            quantization = "ascend"
        else:
            reasons.append(reason("quantization_unsupported", "warning", label=label))
            quantization = None
    longest = int(facts.get("max_position_embeddings") or 0)
    max_model_len = request.max_model_len or longest or 4096
    if longest and max_model_len > longest:
        reasons.append(reason("max_model_len_exceeds_model", "warning", asked=max_model_len, longest=longest))
    weights = memory.serving_weights(facts, quantization, dtype)
    weights = memory.with_redundant_experts(facts, weights, request.redundant_experts)
    if not request.mtp_tokens:
        return Settings(dtype, quantization, max_model_len, weights)
    draft = memory.mtp_weights(facts, weights)
    layers = int(facts.get("mtp_layers") or 0)
    return Settings(dtype, quantization, max_model_len, weights, draft, layers)


def _dtype(facts: dict[str, Any], request: PlanInput, reasons: list[Reason]) -> str:
    wanted = request.dtype
    if wanted == "auto":
        wanted = str(facts.get("dtype") or "bfloat16")
        if wanted not in memory.DTYPE_BYTES or wanted == "float32":
            wanted = "bfloat16"  # vLLM serves float32 checkpoints in 16 bits unless told otherwise
    if request.chip == "310p" and wanted != "float16":
        if wanted == "bfloat16":
            reasons.append(reason("bf16_unsupported_on_310p", "warning"))
        else:
            reasons.append(reason("dtype_unsupported_on_310p", "warning", dtype=wanted))
        return "float16"
    return wanted


def _eager(facts: dict[str, Any], request: PlanInput, tensor_parallel: int, reasons: list[Reason]) -> bool:
    eager = request.enforce_eager
    if request.chip == "310p":
        reasons.append(reason("eager_required_on_310p", "info"))
        eager = True
    heads_per_npu = int(facts["num_attention_heads"]) // tensor_parallel
    if facts.get("mla") and not eager and heads_per_npu not in MLA_GRAPH_HEADS_PER_NPU:
        reasons.append(reason("mla_graph_mode_heads", "warning", tp=tensor_parallel, heads=heads_per_npu))
        eager = True
    return eager


def _weights_do_not_fit(
    facts: dict[str, Any], request: PlanInput, settings: Settings, layout: Layout
) -> list[Reason]:
    vllm_share = (
        layout.memory.total_bytes - layout.memory.free_bytes - memory.DRIVER_RESERVED_BYTES[request.chip]
    )
    reasons = [
        reason(
            "weights_do_not_fit",
            "error",
            weights=gib(settings.weights.total_bytes),
            label=settings.weights.label,
            npus=request.npus_per_node * layout.nodes,
            npu_gib=gib(request.npu_memory_bytes),
            util=request.gpu_memory_utilization,
            tp=layout.tensor_parallel,
            per_npu=gib(layout.weights_per_npu),
            allowed=gib(vllm_share),
        )
    ]
    if not facts.get("moe"):
        reasons.append(reason("dense_needs_pipeline", "error"))
    elif not settings.weights.expert_bytes:
        reasons.append(reason("moe_sizes_unknown", "warning"))
    reasons.extend(_as_w8a8(facts, request, settings))
    return reasons


def _as_w8a8(facts: dict[str, Any], request: PlanInput, settings: Settings) -> list[Reason]:
    """The same question with W8A8 weights, as a suggestion, while the weights are still 16-bit."""
    if settings.quantization is not None or memory.is_quantized(facts):
        return []
    alternative = plan(facts, replace(request, quantization="ascend"))
    if not alternative.fits or alternative.weights is None or alternative.memory is None:
        return []
    return [
        reason(
            "fits_as_w8a8",
            "info",
            weights=gib(alternative.weights.total_bytes),
            tp=alternative.tensor_parallel_size,
            dp=alternative.data_parallel_size,
            nodes=alternative.nodes,
            kv=gib(alternative.memory.kv_cache_bytes),
            tokens=alternative.kv_cache_tokens,
        )
    ]


def _empty_plan(request: PlanInput, reasons: list[Reason]) -> Plan:
    return Plan(
        fits=False,
        tensor_parallel_size=request.tensor_parallel_size or 1,
        data_parallel_size=1,
        nodes=1,
        enable_expert_parallel=False,
        dtype=request.dtype,
        quantization=request.quantization,
        enforce_eager=request.enforce_eager,
        max_model_len=request.max_model_len or 0,
        gpu_memory_utilization=request.gpu_memory_utilization,
        block_size=memory.BLOCK_SIZE,
        weights=None,
        weights_bytes_per_npu=0,
        kv_bytes_per_token=0,
        kv_cache_tokens=0,
        max_concurrent_seqs=0,
        memory=None,
        reasons=reasons,
    )
