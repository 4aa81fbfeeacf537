"""Byte arithmetic behind the planner: weights per NPU, KV cache per token, runtime reserve.

Units: every size here is in bytes, and every "GiB" is 2**30 bytes. npu-smi reports HBM in MB that are
really MiB (a 64 GB 910B shows 65536 MB = 64 GiB), vLLM logs GiB, so the planner stays in binary units.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

GIB = 1024**3

# vllm-ascend pages the KV cache in blocks of 128 tokens.
BLOCK_SIZE = 128

DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4}

# HBM the driver and CANN runtime hold before vLLM starts; torch_npu never sees it. An idle 64 GiB 910B
# shows about 3.3 GiB used in npu-smi, and torch_npu reports "60.96 GiB total capacity" for it in OOM
# messages. An idle 300I Pro (310P3) shows about 1.8 GiB used of 21525 MB.
# The 950 is assumed to hold what A2 / A3 hold; no idle 950 reading was at hand.
DRIVER_RESERVED_BYTES = {"910b": 3 * GIB, "a3": 3 * GIB, "310p": 2 * GIB, "950": 3 * GIB}

# Peak activations of the profiling run (default chunked prefill of a few thousand tokens) plus
# torch_npu's workspace. Checked against a real vllm-ascend start-up: Qwen2.5-7B, TP 1, 0.90 of a 64 GiB
# NPU logged 744,048 KV tokens; with these constants the planner predicts within 0.1 % of that.
WORKSPACE_BYTES = 1 * GIB
MIB = 1024**2
# HCCL gives every communicator a send and a receive buffer of HCCL_BUFFSIZE MB each (CANN's HCCL_BUFFSIZE
# reference: "each communicator occupies 2 x HCCL_BUFFSIZE"; 200 MB by default). The recipes raise it (the
# 950's 512 MB), so it is counted from the launch's own value.
HCCL_BUFFERS_PER_COMMUNICATOR = 2

# msModelSlim W8A8 keeps, per output channel of each quantized linear layer, a weight scale and offset
# (fp32), a dequant scale (int64) and a quant bias (int32): 20 bytes per row of `hidden` weights.
W8A8_SCALE_BYTES_PER_ROW = 20


@dataclass(frozen=True)
class Weights:
    """How much the weights weigh at serving time and how much of that is routed experts."""

    total_bytes: int
    expert_bytes: int  # routed experts only; 0 for dense models or when expert sizes are unknown
    label: str  # what the numbers are in: "BF16", "FP16", "W8A8", or the checkpoint's own quant type
    estimated: bool  # True when derived from parameter counts rather than read from the checkpoint

    def per_npu(self, tensor_parallel: int, expert_parallel_world: int | None = None) -> int:
        """Bytes one NPU holds: everything split over TP, routed experts over the EP world if any."""
        if expert_parallel_world:
            dense = self.total_bytes - self.expert_bytes
            return -(-dense // tensor_parallel) + -(-self.expert_bytes // expert_parallel_world)
        return -(-self.total_bytes // tensor_parallel)


def is_quantized(facts: dict[str, Any]) -> bool:
    return bool(facts.get("quantization"))


def quant_bytes_per_param(label: str) -> float:
    """Rough storage per weight of an already-quantized checkpoint, from its quant type name."""
    upper = label.upper()
    if upper.startswith("W4"):
        return 0.5
    if upper.startswith("W8") or "INT8" in upper or "FP8" in upper:
        return 1.0
    return 2.0


def param_count(facts: dict[str, Any]) -> int:
    """Parameters from the headers, else from the index's total_size and the checkpoint dtype."""
    if facts.get("params"):
        return int(facts["params"])
    weights_bytes = int(facts["weights_bytes"])
    if is_quantized(facts):
        return int(weights_bytes / quant_bytes_per_param(str(facts["quantization"])))
    return weights_bytes // DTYPE_BYTES.get(str(facts.get("dtype")), 2)


def embedding_params(facts: dict[str, Any]) -> int:
    """Input embedding plus lm_head (a second copy unless the config ties them)."""
    copies = 1 if facts.get("tie_word_embeddings") else 2
    return int(facts["vocab_size"]) * int(facts["hidden_size"]) * copies


def routed_expert_params(facts: dict[str, Any]) -> int:
    """Parameters in routed experts (gate, up and down projections), or 0 when the sizes are unknown.

    Needs moe.moe_intermediate_size; moe.first_dense_layers counts the leading dense layers
    (DeepSeek's first_k_dense_replace).
    """
    moe = facts.get("moe") or {}
    intermediate = moe.get("moe_intermediate_size")
    routed = moe.get("routed_experts")
    if not intermediate or not routed:
        return 0
    moe_layers = int(facts["num_layers"]) - int(moe.get("first_dense_layers") or 0)
    return moe_layers * int(routed) * 3 * int(facts["hidden_size"]) * int(intermediate)


def serving_weights(facts: dict[str, Any], quantization: str | None, dtype: str) -> Weights:
    """Weights as vLLM will hold them, in `dtype`, optionally after W8A8 quantization."""
    params = param_count(facts)
    expert_params = min(routed_expert_params(facts), params)
    if is_quantized(facts):
        total = int(facts["weights_bytes"] or params * quant_bytes_per_param(str(facts["quantization"])))
        expert = total * expert_params // params
        return Weights(total, expert, str(facts["quantization"]).upper(), estimated=False)
    if quantization == "ascend":
        # Linear layers become int8 plus per-row scales; embeddings, lm_head and norms stay 16-bit.
        hidden = int(facts["hidden_size"])
        kept = embedding_params(facts) + (2 * int(facts["num_layers"]) + 1) * hidden
        quantized = max(params - kept, 0)
        total = kept * 2 + quantized + quantized * W8A8_SCALE_BYTES_PER_ROW // hidden
        expert = expert_params + expert_params * W8A8_SCALE_BYTES_PER_ROW // hidden
        return Weights(total, expert, "W8A8", estimated=True)
    size = DTYPE_BYTES[dtype]
    from_checkpoint = facts.get("weights_bytes") and DTYPE_BYTES.get(str(facts.get("dtype"))) == size
    total = int(facts["weights_bytes"]) if from_checkpoint else params * size
    return Weights(total, expert_params * size, dtype_label(dtype), estimated=not from_checkpoint)


def dtype_label(dtype: str) -> str:
    return {"bfloat16": "BF16", "float16": "FP16", "float32": "FP32"}[dtype]


def kv_heads_per_npu(facts: dict[str, Any], tensor_parallel: int) -> int:
    """KV heads each NPU stores: split over TP, and at least one (replicated when TP > KV heads)."""
    kv_heads = int(facts.get("num_kv_heads") or facts["num_attention_heads"])
    return max(1, kv_heads // tensor_parallel)


def kv_bytes_per_token(facts: dict[str, Any], tensor_parallel: int, dtype: str, extra_layers: int = 0) -> int:
    """KV cache bytes one NPU stores per token; `extra_layers` are MTP draft layers, which cache too.

    MLA models cache one compressed latent (kv_lora_rank + qk_rope_head_dim) per layer, the same on
    every TP rank; other models cache K and V for their share of the KV heads.
    """
    size = DTYPE_BYTES[dtype]
    layers = int(facts["num_layers"]) + extra_layers
    mla = facts.get("mla")
    if mla:
        return (int(mla["kv_lora_rank"]) + int(mla["qk_rope_head_dim"])) * layers * size
    head_dim = int(facts["head_dim"])
    return layers * kv_heads_per_npu(facts, tensor_parallel) * head_dim * 2 * size


def hccl_communicators(tensor_parallel: int, data_parallel: int, expert_parallel: bool) -> int:
    """HCCL communicators each NPU joins, an estimate of vLLM's and vllm-ascend's process groups: the TP
    group when TP > 1, the DP group when DP > 1, and with expert parallel the EP group plus vllm-ascend's
    MC2 group (MoE dispatch and combine)."""
    return int(tensor_parallel > 1) + int(data_parallel > 1) + 2 * int(expert_parallel)


def hccl_bytes(buffsize_mb: int, communicators: int) -> int:
    return communicators * HCCL_BUFFERS_PER_COMMUNICATOR * buffsize_mb * MIB


def mtp_weights(facts: dict[str, Any], weights: Weights) -> Weights:
    """The weights of the model's MTP layers (DeepSeek's num_nextn_predict_layers) when they run as
    speculative decoding drafts: each like one of the model's own layers (its experts included) plus the
    projection of the two hidden states into one (eh_proj); embedding and head are shared with the model.

    A checkpoint that ships its MTP layers (DeepSeek-V3/R1's layer 61) counts them in weights_bytes already,
    so with MTP on the plan counts one layer twice: an error of one layer in sixty, on the safe side.
    """
    layers = int(facts.get("mtp_layers") or 0)
    if not layers:
        return Weights(0, 0, weights.label, weights.estimated)
    num_layers, hidden = int(facts["num_layers"]), int(facts["hidden_size"])
    moe = facts.get("moe") or {}
    moe_layers = num_layers - int(moe.get("first_dense_layers") or 0) if weights.expert_bytes else 0
    experts = weights.expert_bytes // moe_layers if moe_layers else 0
    embeddings = embedding_params(facts) * 2  # embeddings and head stay 16-bit, even in W8A8
    dense = max(weights.total_bytes - weights.expert_bytes - embeddings, 0) // num_layers
    projection = 2 * hidden * hidden * 2
    return Weights(layers * (dense + experts + projection), layers * experts, weights.label, estimated=True)


def with_redundant_experts(facts: dict[str, Any], weights: Weights, redundant: int) -> Weights:
    """The weights with EPLB's `redundant` extra copies of routed experts (each one expert's size)."""
    routed = int((facts.get("moe") or {}).get("routed_experts") or 0)
    if not redundant or not routed or not weights.expert_bytes:
        return weights
    extra = -(-weights.expert_bytes * redundant // routed)
    total, expert = weights.total_bytes + extra, weights.expert_bytes + extra
    return Weights(total, expert, weights.label, weights.estimated)


def combined(first: Weights, second: Weights) -> Weights:
    return Weights(
        first.total_bytes + second.total_bytes,
        first.expert_bytes + second.expert_bytes,
        first.label,
        first.estimated or (second.estimated and second.total_bytes > 0),
    )


@dataclass(frozen=True)
class NpuMemory:
    """One NPU's memory plan, for the stacked bar: the four parts add up to total_bytes.

    kv_cache_bytes is negative when the weights alone overflow what vLLM may use.
    """

    total_bytes: int
    weights_bytes: int
    kv_cache_bytes: int
    reserve_bytes: int
    free_bytes: int

    def as_dict(self) -> dict[str, int]:
        return {
            "total_bytes": self.total_bytes,
            "weights_bytes": self.weights_bytes,
            "kv_cache_bytes": self.kv_cache_bytes,
            "reserve_bytes": self.reserve_bytes,
            "free_bytes": self.free_bytes,
        }


def npu_memory(total: int, chip: str, utilization: float, weights: int, collective: int) -> NpuMemory:
    """Split one NPU: vLLM may use `utilization` of what torch_npu sees; the rest stays free.

    torch_npu sees the total less the driver's share, and vLLM applies gpu_memory_utilization to that;
    its profiling counts HCCL's buffers (`collective`, see hccl_bytes) inside that share.
    """
    driver = DRIVER_RESERVED_BYTES[chip]
    workspace = WORKSPACE_BYTES + collective
    allowed = engine_share(total, chip, utilization)
    kv_cache = allowed - weights - workspace
    free = total - driver - allowed
    return NpuMemory(total, weights, kv_cache, driver + workspace, free)


def engine_share(total: int, chip: str, utilization: float) -> int:
    """Bytes of one NPU an engine takes at `utilization`: vLLM's gpu_memory_utilization is a per-instance
    share of the memory torch_npu sees (the total less the driver's part), and each engine on a shared NPU
    takes its own; two engines at 0.4 and 0.5 fit one NPU, two at 0.6 do not (vLLM refuses to start the
    second: "Free memory on device ... is less than desired GPU memory utilization")."""
    return int((total - DRIVER_RESERVED_BYTES[chip]) * utilization)


def utilization_for(total: int, chip: str, free: int) -> float:
    """The largest gpu_memory_utilization, in steps of 0.05, whose share fits in `free` bytes of the NPU."""
    usable = total - DRIVER_RESERVED_BYTES[chip]
    if usable <= 0 or free <= 0:
        return 0.0
    return int(min(free / usable, 1.0) * 20 + 1e-9) / 20


def kv_tokens(kv_cache_bytes: int, bytes_per_token: int) -> int:
    """Tokens that fit, in whole blocks of BLOCK_SIZE tokens."""
    if kv_cache_bytes <= 0:
        return 0
    return kv_cache_bytes // (bytes_per_token * BLOCK_SIZE) * BLOCK_SIZE


def gib(value: int | float) -> str:
    """Bytes as a short GiB figure for sentences: 439.6."""
    return f"{value / GIB:.1f}"
