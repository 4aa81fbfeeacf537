"""Describe a model folder without loading its weights.

Reads config.json, the safetensors headers (or only the index when the shards are not there yet), the
tokenizer files and a quant_model_description.json if the folder was already quantized.

    python -m workers.models.inspect DIR      # prints the description as JSON; exit 2 if DIR is no model
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from workers.models.safetensors_io import SafetensorsFormatError, read_header, weight_files

INDEX_NAMES = ("model.safetensors.index.json", "quant_model_weights.safetensors.index.json")
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json", "tiktoken.model", "qwen.tiktoken")
CHAT_TEMPLATE_FILES = ("chat_template.jinja", "chat_template.json")

# safetensors dtype -> the torch_dtype spelling config.json uses.
DTYPE_NAMES = {
    "BF16": "bfloat16",
    "F16": "float16",
    "F32": "float32",
    "F64": "float64",
    "I8": "int8",
    "F8_E4M3": "float8_e4m3fn",
    "F8_E5M2": "float8_e5m2",
}


NO_WEIGHTS = {"params": None, "weights_bytes": None, "bytes_by_dtype": None, "dominant_dtype": None}


class NotAModelError(Exception):
    """The folder does not hold a model (no readable config.json, or broken weight files)."""


def inspect_model(path: str | Path) -> dict[str, Any]:
    """The facts a planner needs about the model in folder `path`; see the module docstring."""
    folder = Path(path)
    config = _read_config(folder)
    nested = config.get("text_config")
    text_config: dict[str, Any] = nested if isinstance(nested, dict) else config
    weights = _weights_summary(folder)
    hidden = text_config.get("hidden_size")
    heads = text_config.get("num_attention_heads")
    mla = mla_facts(text_config)
    head_dim = _head_dim(text_config, mla, hidden, heads)
    architectures = config.get("architectures") or [None]
    return {
        "architecture": architectures[0],
        "model_type": config.get("model_type"),
        "params": weights["params"],
        "weights_bytes": weights["weights_bytes"],
        "bytes_by_dtype": weights["bytes_by_dtype"],
        "dtype": config.get("torch_dtype") or config.get("dtype") or weights["dominant_dtype"],
        "hidden_size": hidden,
        "num_layers": text_config.get("num_hidden_layers"),
        "num_attention_heads": heads,
        "num_kv_heads": text_config.get("num_key_value_heads") or heads,
        "head_dim": head_dim,
        "vocab_size": text_config.get("vocab_size"),
        "max_position_embeddings": text_config.get("max_position_embeddings"),
        "moe": moe_facts(text_config),
        "mla": mla,
        "quantization": _quantization(folder, config),
        "has_tokenizer": any((folder / name).is_file() for name in TOKENIZER_FILES),
        "has_chat_template": _has_chat_template(folder),
    }


def moe_facts(config: dict[str, Any]) -> dict[str, int] | None:
    """Routed/shared expert counts under the names DeepSeek, Qwen-MoE and Mixtral configs use."""
    routed = config.get("n_routed_experts") or config.get("num_experts") or config.get("num_local_experts")
    if not routed:
        return None
    shared = config.get("n_shared_experts")
    if shared is None:
        # Qwen2-MoE has one shared expert whenever it gives it an intermediate size.
        shared = 1 if config.get("shared_expert_intermediate_size") else 0
    return {
        "routed_experts": routed,
        "shared_experts": shared,
        "experts_per_token": config.get("num_experts_per_tok"),
    }


def _head_dim(config: dict[str, Any], mla: dict | None, hidden: int | None, heads: int | None) -> int | None:
    """Each attention head's query/key size. MLA models (DeepSeek-V2/V3/R1) do not split hidden_size over
    the heads: a head's query and key are qk_nope_head_dim + qk_rope_head_dim (128 + 64 on V3, where
    hidden / heads would say 56), and a `head_dim` in their config is the rotary part only, as
    transformers writes it."""
    if mla and mla["qk_nope_head_dim"] is not None and mla["qk_rope_head_dim"] is not None:
        return int(mla["qk_nope_head_dim"]) + int(mla["qk_rope_head_dim"])
    if config.get("head_dim") is not None:
        return config["head_dim"]
    return hidden // heads if hidden and heads else None


def mla_facts(config: dict[str, Any]) -> dict[str, int | None] | None:
    """Multi-head latent attention sizes (DeepSeek-V2/V3); None for ordinary attention."""
    if config.get("kv_lora_rank") is None:
        return None
    return {
        "kv_lora_rank": config.get("kv_lora_rank"),
        "q_lora_rank": config.get("q_lora_rank"),  # null on V2-Lite, which projects q directly
        "qk_rope_head_dim": config.get("qk_rope_head_dim"),
        "qk_nope_head_dim": config.get("qk_nope_head_dim"),
        "v_head_dim": config.get("v_head_dim"),
    }


def _read_config(folder: Path) -> dict[str, Any]:
    if not folder.is_dir():
        raise NotAModelError(f"{folder} is not a folder; give the folder that holds config.json")
    config_path = folder / "config.json"
    if not config_path.is_file():
        raise NotAModelError(
            f"{folder} holds no config.json, so it is not a model folder; "
            "give the folder that holds config.json and the *.safetensors weights"
        )
    try:
        config = json.loads(config_path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise NotAModelError(f"{config_path} is not valid JSON ({error}); re-download it") from error
    if not isinstance(config, dict) or not (config.get("architectures") or config.get("model_type")):
        raise NotAModelError(f"{config_path} names no architectures or model_type; it is not a model config")
    return config


def _weights_summary(folder: Path) -> dict[str, Any]:
    """Exact counts from the shard headers; only the index's total_size when the shards are absent."""
    files = weight_files(folder)
    if files:
        params = 0
        bytes_by_dtype: dict[str, int] = {}
        for file in files:
            try:
                tensors, _ = read_header(file)
            except (OSError, SafetensorsFormatError) as error:
                raise NotAModelError(f"cannot read weights: {error}; re-download {file.name}") from error
            for tensor in tensors:
                params += tensor.numel
                bytes_by_dtype[tensor.dtype] = bytes_by_dtype.get(tensor.dtype, 0) + tensor.nbytes
        dominant = max(bytes_by_dtype, key=lambda dtype: bytes_by_dtype[dtype]) if bytes_by_dtype else None
        return {
            "params": params,
            "weights_bytes": sum(bytes_by_dtype.values()),
            "bytes_by_dtype": bytes_by_dtype,
            "dominant_dtype": DTYPE_NAMES.get(dominant, dominant) if dominant else None,
        }
    for name in INDEX_NAMES:
        index_path = folder / name
        if index_path.is_file():
            try:
                total = json.loads(index_path.read_text(encoding="utf-8"))["metadata"]["total_size"]
            except (UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError) as error:
                raise NotAModelError(f"{index_path} has no metadata.total_size ({error})") from error
            return {**NO_WEIGHTS, "weights_bytes": int(total)}
    return dict(NO_WEIGHTS)


def _quantization(folder: Path, config: dict[str, Any]) -> str | None:
    description_path = folder / "quant_model_description.json"
    if description_path.is_file():
        try:
            description = json.loads(description_path.read_text(encoding="utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as error:
            raise NotAModelError(f"{description_path} is not valid JSON ({error})") from error
        quant_type = description.get("model_quant_type")
        if quant_type:
            return quant_type
    quantization_config = config.get("quantization_config")
    if isinstance(quantization_config, dict):
        return quantization_config.get("quant_method")
    return None


def _has_chat_template(folder: Path) -> bool:
    if any((folder / name).is_file() for name in CHAT_TEMPLATE_FILES):
        return True
    tokenizer_config = folder / "tokenizer_config.json"
    if not tokenizer_config.is_file():
        return False
    try:
        return bool(json.loads(tokenizer_config.read_text(encoding="utf-8")).get("chat_template"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        return False


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1 or args[0].startswith("-"):
        print("usage: python -m workers.models.inspect MODEL_DIR", file=sys.stderr)
        return 2
    try:
        facts = inspect_model(args[0])
    except NotAModelError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(json.dumps(facts, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
