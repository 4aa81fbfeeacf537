"""Published model configs and node shapes the planner tests share.

Fact dicts mirror workers.models.inspect.inspect_model's output for the public config.json files.
Parameter counts are computed from those configs and match the published sizes (Qwen2.5-7B's index
total_size is 15,231,233,024 bytes; DeepSeek-V2-Lite 15.7B, V2 236B, R1 671B).
"""

from workers.engine.planner.memory import GIB
from workers.engine.planner.plan import PlanInput

A2_NPU = 64 * GIB  # 910B: npu-smi shows 65536 MB of HBM
P310_NPU = 21525 * 1024**2  # Atlas 300I Pro (310P3): npu-smi shows 21525 MB

QWEN25_7B = {
    "architecture": "Qwen2ForCausalLM",
    "model_type": "qwen2",
    "params": 7_615_616_512,
    "weights_bytes": 15_231_233_024,
    "dtype": "bfloat16",
    "hidden_size": 3584,
    "num_layers": 28,
    "num_attention_heads": 28,
    "num_kv_heads": 4,
    "head_dim": 128,
    "vocab_size": 152064,
    "max_position_embeddings": 32768,
    "moe": None,
    "mla": None,
    "quantization": None,
}
QWEN25_72B = {
    **QWEN25_7B,
    "params": 72_706_203_648,
    "weights_bytes": 145_412_407_296,
    "hidden_size": 8192,
    "num_layers": 80,
    "num_attention_heads": 64,
    "num_kv_heads": 8,
}
DEEPSEEK_MLA = {
    "kv_lora_rank": 512,
    "q_lora_rank": 1536,
    "qk_rope_head_dim": 64,
    "qk_nope_head_dim": 128,
    "v_head_dim": 128,
}
DEEPSEEK_V2_LITE = {
    "architecture": "DeepseekV2ForCausalLM",
    "model_type": "deepseek_v2",
    "params": 15_706_484_224,
    "weights_bytes": 31_412_968_448,
    "dtype": "bfloat16",
    "hidden_size": 2048,
    "num_layers": 27,
    "num_attention_heads": 16,
    "num_kv_heads": 16,
    "head_dim": 128,
    "vocab_size": 102400,
    "max_position_embeddings": 163840,
    "moe": {
        "routed_experts": 64,
        "shared_experts": 2,
        "experts_per_token": 6,
        "moe_intermediate_size": 1408,
        "first_dense_layers": 1,
    },
    "mla": {**DEEPSEEK_MLA, "q_lora_rank": None},
    "quantization": None,
}
DEEPSEEK_V2 = {
    **DEEPSEEK_V2_LITE,
    "params": 235_741_434_880,
    "weights_bytes": 471_482_869_760,  # the "472 GB of BF16 weights"
    "hidden_size": 5120,
    "num_layers": 60,
    "num_attention_heads": 128,
    "num_kv_heads": 128,
    "head_dim": 40,
    "moe": {
        "routed_experts": 160,
        "shared_experts": 2,
        "experts_per_token": 6,
        "moe_intermediate_size": 1536,
        "first_dense_layers": 1,
    },
    "mla": DEEPSEEK_MLA,
}
DEEPSEEK_R1 = {
    **DEEPSEEK_V2,
    "architecture": "DeepseekV3ForCausalLM",
    "model_type": "deepseek_v3",
    "params": 671_026_419_200,
    "weights_bytes": 1_342_052_838_400,
    "hidden_size": 7168,
    "num_layers": 61,
    "vocab_size": 129280,
    "moe": {
        "routed_experts": 256,
        "shared_experts": 1,
        "experts_per_token": 8,
        "moe_intermediate_size": 2048,
        "first_dense_layers": 3,
    },
}


def a2_node(**overrides):
    return PlanInput(**{"npu_memory_bytes": A2_NPU, "npus_per_node": 8, **overrides})


def codes(result):
    return [reason.code for reason in result.reasons]
