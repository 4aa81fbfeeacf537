"""The planner's types: what it is asked (PlanInput), what it settles first (Settings) and what it answers
(Plan). Below workers.engine.planner.plan and the modules it is split into (plan_layout, plan_explain,
plan_cli), so they share them without importing each other."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from workers.engine.planner.memory import GIB, NpuMemory, Weights
from workers.engine.planner.plan_reasons import Reason

CHIPS = ("910b", "a3", "310p", "950")


class PlanInputError(ValueError):
    """The planner was asked something impossible (bad field values); the message names the field."""


@dataclass(frozen=True)
class PlanInput:
    npu_memory_bytes: int  # per NPU, from the inventory
    npus_per_node: int
    nodes: int = 1
    chip: str = "910b"
    quantization: str | None = None  # None, or "ascend" for msModelSlim W8A8 weights
    dtype: str = "auto"  # auto | bfloat16 | float16 | float32
    max_model_len: int | None = None  # None: the model's max_position_embeddings, as vLLM does
    gpu_memory_utilization: float = 0.9
    tensor_parallel_size: int | None = None  # None: let the planner choose
    data_parallel_size: int | None = None
    enforce_eager: bool = False
    hccl_buffsize_mb: int = 200  # the launch's HCCL_BUFFSIZE (recipes and env overrides change it)
    mtp_tokens: int = 0  # MTP speculative decoding draft tokens; 0: off
    redundant_experts: int = 0  # EPLB's extra expert copies over the EP ranks


@dataclass(frozen=True)
class Plan:
    fits: bool
    tensor_parallel_size: int
    data_parallel_size: int
    nodes: int
    enable_expert_parallel: bool
    dtype: str
    quantization: str | None
    enforce_eager: bool
    max_model_len: int
    gpu_memory_utilization: float
    block_size: int
    weights: Weights | None
    weights_bytes_per_npu: int
    kv_bytes_per_token: int  # per NPU
    kv_cache_tokens: int  # per engine (one DP rank), as vLLM logs "KV cache size: N tokens"
    max_concurrent_seqs: int  # full max-model-len sequences one engine can hold at once
    memory: NpuMemory | None
    reasons: list[Reason]
    mtp_tokens: int = 0
    redundant_experts: int = 0
    hccl_bytes_per_npu: int = 0

    def as_dict(self) -> dict[str, Any]:
        """The CLI's JSON: the documented keys first, then the details the panel shows."""
        return {
            "fits": self.fits,
            "tensor_parallel_size": self.tensor_parallel_size,
            "data_parallel_size": self.data_parallel_size,
            "nodes": self.nodes,
            "weights_gb_per_npu": round(self.weights_bytes_per_npu / GIB, 2),
            "kv_cache_tokens": self.kv_cache_tokens,
            "max_concurrent_seqs": self.max_concurrent_seqs,
            "reasons": [reason.as_dict() for reason in self.reasons],
            "enable_expert_parallel": self.enable_expert_parallel,
            "dtype": self.dtype,
            "quantization": self.quantization,
            "enforce_eager": self.enforce_eager,
            "max_model_len": self.max_model_len,
            "gpu_memory_utilization": self.gpu_memory_utilization,
            "block_size": self.block_size,
            "weights_total_bytes": self.weights.total_bytes if self.weights else None,
            "weights_label": self.weights.label if self.weights else None,
            "kv_bytes_per_token": self.kv_bytes_per_token,
            "memory_per_npu": self.memory.as_dict() if self.memory else None,
            "mtp_tokens": self.mtp_tokens,
            "redundant_experts": self.redundant_experts,
            "hccl_bytes_per_npu": self.hccl_bytes_per_npu,
        }


@dataclass(frozen=True)
class Settings:
    """What the plan settles before choosing a layout."""

    dtype: str
    quantization: str | None
    max_model_len: int
    weights: Weights
    draft: Weights | None = None  # MTP layers run as speculative-decoding drafts
    draft_layers: int = 0
