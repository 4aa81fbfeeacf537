"""Quantize a Hugging Face safetensors model to W8A8_DYNAMIC, the layout vllm-ascend loads with
`--quantization ascend`, on CPU and without torch.

Every decoder linear weight becomes int8 `weight` [out, in] + float32 `weight_scale` and `weight_offset`
[out, 1]; everything else is copied unchanged. Input shards are processed one at a time, block by block,
and each becomes one output shard written as it goes, so memory stays far below one shard. Weights are
quantized straight from the memory-mapped shard (no copy into a read buffer), and the pages of each block
are unmapped again once it is written.

    python -m workers.models.quantize --scheme w8a8_dynamic SRC DST
        stderr: `progress <pct> <tensor>` lines; stdout: the report as JSON; exit 2 on a bad source
"""

from __future__ import annotations

import argparse
import json
import mmap
import os
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, BinaryIO

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
    map_tensor,
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
# Work is handed to the pool in blocks of about 4 MB (quantize_block works through each in cache-sized
# slices): each handover costs thread wake-ups and GIL traffic, and 1 MB blocks ran ~25% slower on two
# cores; much larger blocks leave too few in flight per tensor.
BLOCK_BYTES = 4 * 1024 * 1024
# numpy releases the GIL in its loops, so threads quantize blocks in parallel while the main thread writes
# the results out in order; a short window of blocks in flight keeps memory bounded.
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
    outputs = _OutputBuffers()
    with staged_output(destination) as staging, ThreadPoolExecutor(WORKERS) as pool:
        names = shard_names(OUTPUT_STEM, len(shards))
        for (shard_path, tensors), output_name in zip(shards, names, strict=True):
            planned = _plan_output(tensors)
            with (
                shard_path.open("rb") as source_handle,
                ShardWriter(staging / output_name, planned, {"format": "pt"}) as writer,
            ):
                errors.update(_rewrite_shard(source_handle, tensors, writer, progress, pool, outputs))
            description.update(_describe(tensors))
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


def _describe(tensors: list[TensorInfo]) -> dict[str, str]:
    """quant_model_description entries of one shard: every tensor's type, scales and offsets included."""
    entries = {}
    for info in tensors:
        if is_quantized_linear(info.name, info.shape):
            entries.update(dict.fromkeys((info.name, *scale_and_offset_names(info.name)), QUANT_TYPE))
        else:
            entries[info.name] = FLOAT_TYPE
    return entries


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


def _rewrite_shard(
    handle: BinaryIO,
    tensors: list[TensorInfo],
    writer: ShardWriter,
    progress: _Progress,
    pool: ThreadPoolExecutor,
    outputs: _OutputBuffers,
) -> dict[str, float]:
    """Quantize or copy every tensor of one shard into `writer`, in order; returns the max relative
    dequantization error of each quantized weight.

    Weights are quantized straight from the memory-mapped shard: no copy into a read buffer, and blocks
    stay in flight across tensor boundaries, so the workers do not idle at the end of every tensor.
    """
    errors: dict[str, float] = {}
    # Not closed explicitly: numpy views keep the map alive until the last of them is gone.
    mapped = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
    ordered = _InOrder(pool, BLOCKS_IN_FLIGHT)
    for info in tensors:
        if is_quantized_linear(info.name, info.shape):
            weight = _WeightOutput(info, writer, progress, mapped, errors)
            ordered.then(weight.begin)
            for first, block in weight.blocks():
                out = outputs.take(block.shape)
                ordered.submit(_quantize_on_worker, (block, info, out), weight.block_done, first)
            ordered.then(weight.end)
        else:
            ordered.then(_copy_tensor, handle, info, writer, progress)
    ordered.finish()
    return errors


def _copy_tensor(handle: BinaryIO, info: TensorInfo, writer: ShardWriter, progress: _Progress) -> None:
    writer.begin(info.name)
    copy_tensor_bytes(handle, info, writer.handle)
    writer.mark_written(info.nbytes)
    writer.end()
    progress.advance(info.nbytes, info.name)


class _InOrder:
    """Runs jobs on the pool a few ahead, and hands their results to follow-up calls on this thread in
    the order they were submitted: the output file is written strictly in order."""

    def __init__(self, pool: ThreadPoolExecutor, window: int) -> None:
        self._pool = pool
        self._window = window
        self._pending: deque[tuple[Future | None, Callable[..., None], tuple]] = deque()

    def submit(self, job: Callable, job_args: tuple, follow_up: Callable[..., None], *args: Any) -> None:
        """Run job(*job_args) on the pool; later call follow_up(*args, result) here, in order."""
        self._pending.append((self._pool.submit(job, *job_args), follow_up, args))
        while len(self._pending) >= self._window:
            self._run_oldest()

    def then(self, follow_up: Callable[..., None], *args: Any) -> None:
        """Call follow_up(*args) here once everything submitted before it has been followed up."""
        self._pending.append((None, follow_up, args))

    def finish(self) -> None:
        while self._pending:
            self._run_oldest()

    def _run_oldest(self) -> None:
        future, follow_up, args = self._pending.popleft()
        if future is None:
            follow_up(*args)
        else:
            follow_up(*args, future.result())


class _WeightOutput:
    """One weight on its way out: its int8 blocks are written as they come back, in row order, then its
    scales and zero offsets. Each block's source pages are unmapped once it is written: they stay in the
    page cache, but out of this process's memory, so resident memory stays at the blocks in flight."""

    def __init__(
        self,
        info: TensorInfo,
        writer: ShardWriter,
        progress: _Progress,
        mapped: mmap.mmap,
        errors: dict[str, float],
    ) -> None:
        self.info = info
        self._writer = writer
        self._progress = progress
        self._mapped = mapped
        self._errors = errors
        self._rows = info.shape[0]
        self._row_bytes = info.nbytes // max(self._rows, 1)
        self._scales = np.empty(self._rows, dtype=np.float32)
        self._worst = 0.0

    def blocks(self) -> Iterator[tuple[int, np.ndarray]]:
        """(first row, block) of about BLOCK_BYTES each."""
        weights = map_tensor(self._mapped, self.info)
        rows_per_block = max(1, BLOCK_BYTES // max(self._row_bytes, 1))
        for first in range(0, self._rows, rows_per_block):
            yield first, weights[first : first + rows_per_block]

    def begin(self) -> None:
        self._writer.begin(self.info.name)

    def block_done(self, first: int, result: tuple[np.ndarray, np.ndarray, float]) -> None:
        quantized, scales, error = result
        self._writer.write_part(quantized)
        self._scales[first : first + len(quantized)] = scales
        self._worst = max(self._worst, error)
        begin = self.info.begin + first * self._row_bytes
        _unmap_pages(self._mapped, begin, begin + len(quantized) * self._row_bytes)
        self._progress.advance(len(quantized) * self._row_bytes, self.info.name)

    def end(self) -> None:
        self._writer.end()
        scale_name, offset_name = scale_and_offset_names(self.info.name)
        self._writer.write(scale_name, self._scales.reshape(-1, 1))
        self._writer.write(offset_name, np.zeros((self._rows, 1), dtype=np.float32))
        self._errors[self.info.name] = self._worst


class _OutputBuffers:
    """int8 output buffers reused round-robin by every block of a run, each grown when first needed.

    One more slot than blocks in flight: a slot is reused only after its block has been written.
    """

    def __init__(self) -> None:
        self._slots = [np.empty(0, dtype=np.int8) for _ in range(BLOCKS_IN_FLIGHT + 1)]
        self._taken = 0

    def take(self, shape: tuple[int, ...]) -> np.ndarray:
        slot = self._taken % len(self._slots)
        self._taken += 1
        nbytes = shape[0] * shape[1]
        if self._slots[slot].size < nbytes:
            self._slots[slot] = np.empty(nbytes, dtype=np.int8)
        return self._slots[slot][:nbytes].reshape(shape)


def _unmap_pages(mapped: mmap.mmap, begin: int, end: int) -> None:
    """Drop the whole pages in [begin, end) from this process; the page holding `end` may still be in
    use by the next block and goes with it."""
    start = begin - begin % mmap.PAGESIZE
    stop = end - end % mmap.PAGESIZE
    if stop > start:
        mapped.madvise(mmap.MADV_DONTNEED, start, stop - start)


_thread_state = threading.local()


def _quantize_on_worker(
    block: np.ndarray, info: TensorInfo, out: np.ndarray
) -> tuple[np.ndarray, np.ndarray, float]:
    if not hasattr(_thread_state, "workspace"):
        _thread_state.workspace = Workspace()
    try:
        return quantize_block(block, info.dtype, workspace=_thread_state.workspace, out=out)
    except ValueError as problem:
        raise BadSourceError(f"{info.name}: {problem}") from problem


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
