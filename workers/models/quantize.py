"""Quantize a Hugging Face safetensors model to W8A8_DYNAMIC, the layout vllm-ascend loads with
`--quantization ascend`, on CPU and without torch.

Every decoder linear weight becomes int8 `weight` [out, in] + float32 `weight_scale` and `weight_offset`
[out, 1]; everything else is copied unchanged. Input shards are processed one at a time, block by block,
and each becomes one output shard written as it goes, so memory stays far below one shard.

    python -m workers.models.quantize --scheme w8a8_dynamic SRC DST
        stderr: `progress <pct> <tensor>` lines; stdout: the report as JSON; exit 2 on a bad source
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from workers.models.model_folder import (
    QUANT_DESCRIPTION,
    BadSourceError,
    copy_side_files,
    load_source,
    staged_output,
    write_json,
)
from workers.models.safetensors_io import (
    PlannedTensor,
    ShardWriter,
    TensorInfo,
    copy_tensor_bytes,
    iter_row_blocks,
    shard_names,
    write_index,
)
from workers.models.w8a8 import (
    FLOAT_TYPE,
    QUANT_TYPE,
    Workspace,
    is_quantized_linear,
    quantize_block,
    scale_and_offset_names,
)

OUTPUT_STEM = "quant_model_weights"
DESCRIPTION_VERSION = "1.0.0"
# Blocks of about 1 MB stay in CPU cache through the several numpy passes; measured fastest.
BLOCK_BYTES = 1024 * 1024
# numpy releases the GIL in its loops, so threads quantize blocks in parallel while the main thread reads
# and writes; a short window of blocks in flight keeps memory bounded.
WORKERS = min(4, os.cpu_count() or 1)
BLOCKS_IN_FLIGHT = 2 * WORKERS
SCHEMES = ("w8a8_dynamic",)

ProgressCallback = Callable[[float, str], None]


def quantize_w8a8_dynamic(
    source: str | Path, destination: str | Path, on_progress: ProgressCallback | None = None
) -> dict[str, Any]:
    """Write the W8A8_DYNAMIC version of model `source` to `destination`; return the report.

    Raises BadSourceError when the source is not a quantizable model or the destination is taken.
    """
    started = time.perf_counter()
    folder, config, shards = load_source(source)
    if (folder / QUANT_DESCRIPTION).is_file():
        raise BadSourceError(f"{folder} is already quantized ({QUANT_DESCRIPTION} is present)")
    _reject_unquantizable(shards)
    total_bytes = sum(info.nbytes for _, tensors in shards for info in tensors) or 1
    progress = _Progress(total_bytes, on_progress)
    description: dict[str, str] = {"model_quant_type": QUANT_TYPE, "version": DESCRIPTION_VERSION}
    errors: dict[str, float] = {}
    weight_map: dict[str, str] = {}
    output_bytes = 0
    buffers = _BlockBuffers()
    with staged_output(destination) as staging, ThreadPoolExecutor(WORKERS) as pool:
        names = shard_names(OUTPUT_STEM, len(shards))
        for (shard_path, tensors), output_name in zip(shards, names, strict=True):
            planned = _plan_output(tensors)
            with (
                shard_path.open("rb") as source_handle,
                ShardWriter(staging / output_name, planned, {"format": "pt"}) as writer,
            ):
                for info in tensors:
                    if is_quantized_linear(info.name, info.shape):
                        errors[info.name] = _quantize_tensor(
                            source_handle, info, writer, progress, pool, buffers
                        )
                        for name in (info.name, *scale_and_offset_names(info.name)):
                            description[name] = QUANT_TYPE
                    else:
                        writer.begin(info.name)
                        copy_tensor_bytes(source_handle, info, writer.handle)
                        writer.mark_written(info.nbytes)
                        writer.end()
                        progress.advance(info.nbytes, info.name)
                        description[info.name] = FLOAT_TYPE
            weight_map.update(dict.fromkeys((tensor.name for tensor in planned), output_name))
            output_bytes += sum(tensor.nbytes for tensor in planned)
        if len(names) > 1:
            write_index(staging / f"{OUTPUT_STEM}.safetensors.index.json", weight_map, output_bytes)
        if config.get("tie_word_embeddings") and "lm_head.weight" not in description:
            # vllm-ascend asks the description about every linear layer, the tied head included.
            description["lm_head.weight"] = FLOAT_TYPE
        write_json(staging / QUANT_DESCRIPTION, description)
        write_json(staging / "config.json", _quantized_config(config))
        copied = copy_side_files(folder, staging)
    progress.finish()
    return {
        "scheme": "w8a8_dynamic",
        "source": str(folder),
        "destination": str(Path(destination)),
        "tensors_quantized": len(errors),
        "tensors_kept": sum(len(tensors) for _, tensors in shards) - len(errors),
        "input_bytes": total_bytes,
        "output_bytes": output_bytes,
        "output_shards": names,
        "copied_files": copied,
        "seconds": round(time.perf_counter() - started, 3),
        "max_relative_error": max(errors.values(), default=0.0),
        "relative_error_by_tensor": errors,
    }


def _reject_unquantizable(shards: list[tuple[Path, list[TensorInfo]]]) -> None:
    for shard_path, tensors in shards:
        for info in tensors:
            if is_quantized_linear(info.name, info.shape) and info.dtype not in ("BF16", "F16", "F32"):
                raise BadSourceError(
                    f"{shard_path.name}: {info.name} is {info.dtype}, not a float weight; "
                    "quantize from the BF16/FP16 release of the model (dequantize FP8 checkpoints first)"
                )


def _plan_output(tensors: list[TensorInfo]) -> list[PlannedTensor]:
    """Output tensors in input order; a quantized weight is followed by its scale and offset."""
    planned = []
    for info in tensors:
        if is_quantized_linear(info.name, info.shape):
            rows = info.shape[0]
            scale_name, offset_name = scale_and_offset_names(info.name)
            planned += [
                PlannedTensor(info.name, "I8", info.shape),
                PlannedTensor(scale_name, "F32", (rows, 1)),
                PlannedTensor(offset_name, "F32", (rows, 1)),
            ]
        else:
            planned.append(PlannedTensor(info.name, info.dtype, info.shape))
    return planned


def _quantize_tensor(
    handle,
    info: TensorInfo,
    writer: ShardWriter,
    progress: _Progress,
    pool: ThreadPoolExecutor,
    buffers: _BlockBuffers,
) -> float:
    """Stream one weight through the quantizer; returns its max relative dequantization error."""
    writer.begin(info.name)
    scales = np.empty(info.shape[0], dtype=np.float32)
    worst = 0.0
    row_bytes = info.nbytes // max(info.shape[0], 1)
    for first, quantized, block_scales, error in _quantized_blocks(handle, info, pool, buffers):
        writer.write_part(quantized)
        scales[first : first + len(quantized)] = block_scales
        worst = max(worst, error)
        progress.advance(len(quantized) * row_bytes, info.name)
    writer.end()
    scale_name, offset_name = scale_and_offset_names(info.name)
    writer.write(scale_name, scales.reshape(-1, 1))
    writer.write(offset_name, np.zeros((info.shape[0], 1), dtype=np.float32))
    return worst


class _BlockBuffers:
    """Input and int8 output buffers reused round-robin by every tensor of a run.

    One more slot than blocks in flight: a slot is refilled only after its block has been written.
    """

    def __init__(self) -> None:
        slots = BLOCKS_IN_FLIGHT + 1
        self.inputs = [bytearray(BLOCK_BYTES) for _ in range(slots)]
        self._outputs = [bytearray(BLOCK_BYTES) for _ in range(slots)]

    def output(self, number: int, shape: tuple[int, ...]) -> np.ndarray:
        slot = number % len(self._outputs)
        nbytes = shape[0] * shape[1]
        if len(self._outputs[slot]) < nbytes:
            self._outputs[slot] = bytearray(nbytes)
        return np.frombuffer(self._outputs[slot], dtype=np.int8, count=nbytes).reshape(shape)


def _quantized_blocks(
    handle, info: TensorInfo, pool: ThreadPoolExecutor, buffers: _BlockBuffers
) -> Iterator[tuple[int, np.ndarray, np.ndarray, float]]:
    """(first row, int8 block, scales, error) in row order, computed a few blocks ahead on the pool."""
    in_flight: deque = deque()

    def oldest() -> tuple[int, np.ndarray, np.ndarray, float]:
        first, future = in_flight.popleft()
        try:
            quantized, scales, error = future.result()
        except ValueError as problem:
            raise BadSourceError(f"{info.name}: {problem}") from problem
        return first, quantized, scales, error

    blocks = iter_row_blocks(handle, info, BLOCK_BYTES, ring=buffers.inputs)
    for number, (first, block) in enumerate(blocks):
        out = buffers.output(number, block.shape)
        in_flight.append((first, pool.submit(_quantize_on_worker, block, info.dtype, out)))
        if len(in_flight) >= BLOCKS_IN_FLIGHT:
            yield oldest()
    while in_flight:
        yield oldest()


_thread_state = threading.local()


def _quantize_on_worker(
    block: np.ndarray, dtype: str, out: np.ndarray
) -> tuple[np.ndarray, np.ndarray, float]:
    if not hasattr(_thread_state, "workspace"):
        _thread_state.workspace = Workspace()
    return quantize_block(block, dtype, workspace=_thread_state.workspace, out=out)


def _quantized_config(config: dict[str, Any]) -> dict[str, Any]:
    # A leftover quantization_config (e.g. DeepSeek-V3's fp8) would make vLLM pick the wrong method.
    return {key: value for key, value in config.items() if key != "quantization_config"}


class _Progress:
    """Turns bytes done into percent; reports at most once per whole percent or per tensor change."""

    def __init__(self, total: int, callback: ProgressCallback | None):
        self.total = total
        self.done = 0
        self.callback = callback
        self._last: tuple[int, str] | None = None

    def advance(self, nbytes: int, stage: str) -> None:
        self.done += nbytes
        percent = min(100.0, 100.0 * self.done / self.total)
        key = (int(percent), stage)
        if self.callback and key != self._last:
            self._last = key
            self.callback(round(percent, 1), stage)

    def finish(self) -> None:
        if self.callback:
            self.callback(100.0, "done")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m workers.models.quantize", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--scheme", choices=SCHEMES, required=True)
    parser.add_argument("source", type=Path)
    parser.add_argument("destination", type=Path)
    args = parser.parse_args(argv)

    def print_progress(percent: float, stage: str) -> None:
        print(f"progress {percent:.1f} {stage}", file=sys.stderr, flush=True)

    try:
        report = quantize_w8a8_dynamic(args.source, args.destination, on_progress=print_progress)
    except BadSourceError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
