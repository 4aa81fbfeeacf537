"""Per-output-channel symmetric int8 weight quantization (the weight half of W8A8_DYNAMIC).

Each row (output channel) gets scale = max|W_row| / 127 and offset 0, so W ≈ int8 × scale. Activations
are quantized per token by the engine at run time, so nothing here needs calibration data.
"""

from __future__ import annotations

import re

import numpy as np

from workers.models.safetensors_io import bf16_bits_to_float32

QUANT_TYPE = "W8A8_DYNAMIC"
FLOAT_TYPE = "FLOAT"
INT8_MAX = 127.0

# Linear layers of the decoder that vllm-ascend runs in int8: attention (plain and DeepSeek MLA), MLP,
# MoE experts and shared experts. Routers (mlp.gate), embeddings, norms and lm_head stay in float.
LINEAR_PROJECTIONS = frozenset(
    {
        "q_proj",
        "k_proj",
        "v_proj",
        "o_proj",
        "qkv_proj",
        "gate_proj",
        "up_proj",
        "down_proj",
        "gate_up_proj",
        "q_a_proj",
        "q_b_proj",
        "kv_a_proj_with_mqa",
        "kv_b_proj",
    }
)
DECODER_WEIGHT = re.compile(r"^model\.layers\.\d+\..*\.(?P<projection>[A-Za-z0-9_]+)\.weight$")
FLOAT_DTYPES = ("BF16", "F16", "F32")


def is_quantized_linear(name: str, shape: tuple[int, ...]) -> bool:
    """True for a 2-D decoder linear weight that W8A8_DYNAMIC turns into int8."""
    match = DECODER_WEIGHT.match(name)
    return bool(match) and len(shape) == 2 and match.group("projection") in LINEAR_PROJECTIONS


def scale_and_offset_names(weight_name: str) -> tuple[str, str]:
    module = weight_name.removesuffix(".weight")
    return f"{module}.weight_scale", f"{module}.weight_offset"


def row_abs_max(block: np.ndarray, dtype: str) -> np.ndarray:
    """max|W| of each row as float32.

    For BF16 the sign bit is cleared and the maximum taken on the integer bit patterns: for finite
    non-negative floats, integer order equals numeric order, and an integer max is much cheaper.
    """
    if dtype == "BF16":
        magnitudes = np.bitwise_and(block, 0x7FFF)
        return bf16_bits_to_float32(magnitudes.max(axis=1))
    return np.abs(block).max(axis=1).astype(np.float32)


def quantize_block(
    block: np.ndarray, dtype: str, verify: bool = True
) -> tuple[np.ndarray, np.ndarray, float]:
    """Quantize rows of one weight block.

    Returns (int8 weights, float32 scales of shape [rows], max relative dequantization error), where the
    error is max |W - q·scale| / max|W_row| over the block (0.0 when verify is False).
    """
    if dtype not in FLOAT_DTYPES:
        raise ValueError(f"cannot quantize a {dtype} weight; only BF16, F16 and F32 weights can be quantized")
    row_max = row_abs_max(block, dtype)
    if not np.isfinite(row_max).all():
        raise ValueError("weight holds NaN or infinity; the checkpoint is damaged")
    scale = row_max / np.float32(INT8_MAX)
    # All-zero rows get scale 0 and quantize to zeros instead of dividing by zero.
    inverse = np.divide(np.float32(INT8_MAX), row_max, out=np.zeros_like(row_max), where=row_max > 0)
    values = bf16_bits_to_float32(block) if dtype == "BF16" else block.astype(np.float32)
    scaled = values * inverse[:, None]
    np.rint(scaled, out=scaled)
    # |W·127/max| <= 127 up to one rounding step, so rint already lands in [-127, 127].
    quantized = scaled.astype(np.int8)
    error = 0.0
    if verify:
        np.multiply(quantized, scale[:, None], out=scaled)
        np.subtract(scaled, values, out=scaled)
        np.abs(scaled, out=scaled)
        row_error = scaled.max(axis=1)
        safe_max = np.where(row_max > 0, row_max, np.float32(1))
        error = float((row_error / safe_max).max()) if len(row_error) else 0.0
    return quantized, scale, error
