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
MAGNITUDE_BITS = np.uint16(0x7FFF)
# Rows are quantized a slice of about this many elements at a time: the slice's two float32 scratch
# arrays (2 MB together) mostly stay in a core's 2 MB L2 cache through the passes, where a whole 4 MB BF16
# block widened at once (16 MB of scratch) would stream through memory. Smaller slices compute faster on
# one thread but lose more on two: every numpy call releases and retakes the GIL, and when calls last
# only ~10 µs the worker threads spend their time handing it over (end to end on two cores with 1 MB
# blocks: 64K-element slices 0.93 GB/s, 256K 1.06 GB/s). Row maxima are taken over the whole block at once.
SLICE_ELEMENTS = 256 * 1024


def is_quantized_linear(name: str, shape: tuple[int, ...]) -> bool:
    """True for a 2-D decoder linear weight that W8A8_DYNAMIC turns into int8."""
    match = DECODER_WEIGHT.match(name)
    return match is not None and len(shape) == 2 and match.group("projection") in LINEAR_PROJECTIONS


def scale_and_offset_names(weight_name: str) -> tuple[str, str]:
    module = weight_name.removesuffix(".weight")
    return f"{module}.weight_scale", f"{module}.weight_offset"


def row_abs_max(block: np.ndarray, dtype: str) -> np.ndarray:
    """max|W| of each row as float32.

    For BF16 the maximum is taken on the bit patterns, which is cheaper than widening to float32: for
    finite floats, integer order equals magnitude order. Read as int16, positives keep their order and
    negatives go below zero, so the int16 max is the largest positive; read as uint16, negatives sit
    above 0x8000 ordered by magnitude, so the uint16 max is the largest negative magnitude plus the sign
    bit. With the sign bits cleared, the larger of the two is the largest magnitude (a row with no
    positives or no negatives only makes one of them smaller, never larger).
    """
    if dtype == "BF16":
        positive = block.view(np.int16).max(axis=1).view(np.uint16)
        negative = block.max(axis=1)
        magnitude = np.maximum(positive & MAGNITUDE_BITS, negative & MAGNITUDE_BITS)
        return bf16_bits_to_float32(magnitude)
    return np.abs(block).max(axis=1).astype(np.float32)


class Workspace:
    """Reusable float32 scratch memory for one thread.

    Fresh temporaries for every block cost page faults, which can cost more than the arithmetic; reusing
    one buffer per thread avoids that.
    """

    def __init__(self) -> None:
        self._buffer = np.empty(0, dtype=np.float32)

    def take(self, shape: tuple[int, int], count: int) -> list[np.ndarray]:
        size = shape[0] * shape[1]
        if self._buffer.size < count * size:
            self._buffer = np.empty(count * size, dtype=np.float32)
        return [self._buffer[index * size : (index + 1) * size].reshape(shape) for index in range(count)]


def quantize_block(
    block: np.ndarray,
    dtype: str,
    verify: bool = True,
    workspace: Workspace | None = None,
    out: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray, float]:
    """Quantize rows of one weight block.

    Returns (int8 weights, float32 scales of shape [rows], max relative dequantization error), where the
    error is max |W - q·scale| / max|W_row| over the block (0.0 when verify is False). `out`, if given,
    receives the int8 weights (same shape as block).
    """
    if dtype not in FLOAT_DTYPES:
        raise ValueError(f"cannot quantize a {dtype} weight; only BF16, F16 and F32 weights can be quantized")
    row_max = row_abs_max(block, dtype)
    if not np.isfinite(row_max).all():
        raise ValueError("weight holds NaN or infinity; the checkpoint is damaged")
    # All-zero rows get scale 0 and quantize to zeros instead of dividing by zero.
    inverse = np.divide(np.float32(INT8_MAX), row_max, out=np.zeros_like(row_max), where=row_max > 0)
    quantized = np.empty(block.shape, dtype=np.int8) if out is None else out
    rows, columns = block.shape
    rows_per_slice = max(1, min(rows, SLICE_ELEMENTS // max(columns, 1)))
    values, rounded = (workspace or Workspace()).take((rows_per_slice, columns), 2)
    error = 0.0
    for first in range(0, rows, rows_per_slice):
        part = slice(first, first + rows_per_slice)
        count = min(rows_per_slice, rows - first)
        slice_error = _quantize_slice(
            block[part], dtype, inverse[part, None], values[:count], rounded[:count], quantized[part], verify
        )
        error = max(error, slice_error)
    return quantized, row_max / np.float32(INT8_MAX), error


def _quantize_slice(
    block: np.ndarray,
    dtype: str,
    inverse: np.ndarray,
    values: np.ndarray,
    rounded: np.ndarray,
    quantized: np.ndarray,
    verify: bool,
) -> float:
    """Quantize a cache-sized slice of rows into `quantized`, given 127/max|W_row| as `inverse` [rows, 1];
    returns the max relative error over the slice. `values` and `rounded` are float32 scratch."""
    if dtype == "BF16":
        bf16_bits_to_float32(block, out=values)
    else:
        np.copyto(values, block)
    # Every pass stays float32 -> float32 until the one cast at the end: mixed-dtype ufuncs (rint into
    # int8, float32 minus int8) take numpy's buffered casting path, which costs about twice as much.
    scaled = np.multiply(values, inverse, out=values)
    # |W·127/max| <= 127 up to one rounding step, so the rounded values already lie in [-127, 127].
    np.rint(scaled, out=rounded)
    np.copyto(quantized, rounded, casting="unsafe")
    if not verify or not block.size:
        return 0.0
    # |W - q·scale| / max|W_row| = |W·127/max - q| / 127: the dequantization error of every element,
    # measured in the scaled domain so it costs one subtraction and two reductions instead of a full
    # dequantization.
    np.subtract(scaled, rounded, out=scaled)
    return float(max(scaled.max(), -scaled.min())) / INT8_MAX
