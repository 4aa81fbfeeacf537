"""The W8A8_DYNAMIC writer's machinery (workers.models.quantize): every output shard laid out before any
weight is read (OutputPlan), float tensors copied by the kernel, and weights quantized in row blocks by
this process and forked workers that claim blocks from a shared counter and write each one in place with
pwrite, so the output is the same byte for byte however many processes there are. Each block's source
pages are unmapped once written: memory stays at a few blocks per process.
"""

from __future__ import annotations

import itertools
import mmap
import multiprocessing
import os
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from pathlib import Path
from typing import cast

import numpy as np

from workers.models.model_folder import BadSourceError
from workers.models.safetensors_io import (
    PlannedTensor,
    TensorInfo,
    copy_tensor_to,
    encode_header,
    map_tensor,
    write_array_at,
)
from workers.models.w8a8 import Workspace, is_quantized_linear, quantize_block, scale_and_offset_names

# Weights are handed out in row blocks of about 4 MB (quantize_block works through each in cache-sized
# slices): large enough that claiming a block costs nothing next to quantizing it, small enough that two
# workers finish within a block of each other.
BLOCK_BYTES = 4 * 1024 * 1024
# One process per core quantizes: this one (which also copies the float tensors, in the kernel, and
# counts what the others report) and PROCESSES - 1 forked workers.
PROCESSES = os.cpu_count() or 1
# Below this many bytes of weights (two blocks) this process quantizes alone. Forking a worker costs ~3 ms
# here, about what one core quantizes in that time: on two cores a 5 MB model broke even (14 vs 15 ms),
# a 10 MB one took 14% less time and a 50 MB one 31% less.
PARALLEL_MIN_BYTES = 2 * BLOCK_BYTES
ProgressCallback = Callable[[float, str], None]


@dataclass(frozen=True)
class Piece:
    """A source tensor and where it goes: its data at `output_at` in `output`, and for a weight its
    float32 scales at `scales_at` (its offsets are zeros, which a pre-sized file already holds)."""

    info: TensorInfo
    source: Path
    output: Path
    output_at: int
    scales_at: int = 0


@dataclass(frozen=True)
class Block:
    weight: int  # index into OutputPlan.weights
    first: int
    rows: int


class OutputPlan:
    """Every output shard laid out before any weight is read: each file already holds its header and has
    its final size, and every tensor knows its offset, so pieces can be written in any order by anyone."""

    def __init__(self) -> None:
        self.weights: list[Piece] = []
        self.floats: list[Piece] = []
        self.blocks: list[Block] = []
        self.output_bytes = 0

    def add_shard(self, source: Path, tensors: list[TensorInfo], output: Path, planned: list[PlannedTensor]):
        header, offsets = encode_header(planned, {"format": "pt"})
        with output.open("wb") as handle:
            handle.write(header)
            handle.truncate(len(header) + sum(tensor.nbytes for tensor in planned))
        self.output_bytes += sum(tensor.nbytes for tensor in planned)
        for info in tensors:
            if is_quantized_linear(info.name, info.shape):
                scale_name = scale_and_offset_names(info.name)[0]
                self._add_weight(Piece(info, source, output, offsets[info.name], offsets[scale_name]))
            else:
                self.floats.append(Piece(info, source, output, offsets[info.name]))

    def _add_weight(self, weight: Piece) -> None:
        rows = weight.info.shape[0]
        rows_per_block = max(1, BLOCK_BYTES // max(weight.info.nbytes // max(rows, 1), 1))
        for first in range(0, rows, rows_per_block):
            self.blocks.append(Block(len(self.weights), first, min(rows_per_block, rows - first)))
        self.weights.append(weight)

    @property
    def weight_bytes(self) -> int:
        return sum(weight.info.nbytes for weight in self.weights)


def process_count(plan: OutputPlan, requested: int | None) -> int:
    if requested is not None:
        return max(1, requested)
    # A daemonic process (some task pools) may not have children of its own.
    if plan.weight_bytes < PARALLEL_MIN_BYTES or multiprocessing.current_process().daemon:
        return 1
    return max(1, min(PROCESSES, len(plan.blocks)))


def write_tensors(plan: OutputPlan, progress: Progress, processes: int) -> dict[str, float]:
    """Fill the planned shards; returns the max relative dequantization error of each weight."""
    tally = _Tally(plan, progress)
    if processes <= 1:
        for piece in plan.floats:
            _copy_piece(piece, progress)
        _quantize_blocks(plan, itertools.count().__next__, tally.block_done)
        return tally.errors
    workers = _Workers(plan, processes - 1)
    try:
        for piece in plan.floats:
            _copy_piece(piece, progress)
            workers.collect(tally, timeout=0)

        def report(index: int, error: float) -> None:
            tally.block_done(index, error)
            workers.collect(tally, timeout=0)

        _quantize_blocks(plan, workers.claim, report)
        while workers.collect(tally, timeout=None):
            pass
    finally:
        workers.stop()
    if tally.blocks_left:
        raise RuntimeError(f"quantizer workers exited with {tally.blocks_left} blocks not done")
    return tally.errors


class _Tally:
    """Blocks done, as they are reported: each weight's worst error, and progress."""

    def __init__(self, plan: OutputPlan, progress: Progress) -> None:
        self._plan = plan
        self._progress = progress
        self.errors = {weight.info.name: 0.0 for weight in plan.weights}
        self.blocks_left = len(plan.blocks)

    def block_done(self, index: int, error: float) -> None:
        block = self._plan.blocks[index]
        info = self._plan.weights[block.weight].info
        self.errors[info.name] = max(self.errors[info.name], error)
        self.blocks_left -= 1
        self._progress.advance(block.rows * (info.nbytes // info.shape[0]), info.name)


class _Workers:
    """Forked processes that claim blocks from a counter shared with this process until none are left,
    each reporting every block done (or the problem that stopped it) through its own pipe."""

    def __init__(self, plan: OutputPlan, count: int) -> None:
        context = multiprocessing.get_context("fork")
        self._counter = context.Value("q", 0)
        self._processes = []
        self._open: list[Connection] = []
        for _ in range(count):
            receiver, sender = context.Pipe(duplex=False)
            process = context.Process(target=_worker_main, args=(plan, self.claim, sender), daemon=True)
            process.start()
            sender.close()
            self._processes.append(process)
            self._open.append(receiver)

    def claim(self) -> int:
        """The index of the next block nobody has taken yet."""
        with self._counter.get_lock():
            index = self._counter.value
            self._counter.value += 1
        return index

    def collect(self, tally: _Tally, timeout: float | None) -> bool:
        """Take in what the workers have reported, waiting up to `timeout`; False once all have exited."""
        if not self._open:  # wait() on nothing would never return
            return False
        # wait() hands back some of the connections it was given (its types allow sockets and fds too).
        for connection in cast(list[Connection], wait(self._open, timeout)):
            try:
                kind, *details = connection.recv()
            except EOFError:
                self._open.remove(connection)
                continue
            if kind == "done":
                tally.block_done(*details)
            elif kind == "bad":
                raise BadSourceError(details[0])
            else:
                raise RuntimeError(f"a quantizer worker failed: {details[0]}")
        return bool(self._open)

    def stop(self) -> None:
        for process in self._processes:
            if process.is_alive():
                process.terminate()
            process.join()


def _worker_main(plan: OutputPlan, claim: Callable[[], int], sender: Connection) -> None:
    try:
        _quantize_blocks(plan, claim, lambda index, error: sender.send(("done", index, error)))
    except BadSourceError as problem:
        sender.send(("bad", str(problem)))
    except Exception as problem:  # reported to the main process, which raises it there
        sender.send(("failed", f"{type(problem).__name__}: {problem}"))
    finally:
        sender.close()


def _quantize_blocks(
    plan: OutputPlan, claim: Callable[[], int], report: Callable[[int, float], None]
) -> None:
    """Quantize the blocks `claim` hands out until it runs past the last, writing each in place."""
    workspace = Workspace()
    buffer = np.empty(0, dtype=np.int8)
    files = _OpenFiles()
    while (index := claim()) < len(plan.blocks):
        block = plan.blocks[index]
        weight = plan.weights[block.weight]
        info = weight.info
        mapped = files.source(weight.source)
        rows = map_tensor(mapped, info)[block.first : block.first + block.rows]
        if buffer.size < rows.size:
            buffer = np.empty(rows.size, dtype=np.int8)
        try:
            out = buffer[: rows.size].reshape(rows.shape)
            quantized, scales, error = quantize_block(rows, info.dtype, workspace=workspace, out=out)
        except ValueError as problem:
            raise BadSourceError(f"{info.name}: {problem}") from problem
        output = files.output(weight.output)
        row_bytes = info.nbytes // info.shape[0]
        write_array_at(output, quantized, weight.output_at + block.first * info.shape[1])
        write_array_at(output, scales, weight.scales_at + block.first * scales.itemsize)
        begin = info.begin + block.first * row_bytes
        _unmap_pages(mapped, begin, begin + block.rows * row_bytes)
        report(index, error)
    files.close()


class _OpenFiles:
    """The source map and output descriptor of the shard being worked on; blocks come in file order, so
    one of each is open at a time."""

    def __init__(self) -> None:
        self._source: tuple[Path, mmap.mmap] | None = None
        self._output: tuple[Path, int] | None = None

    def source(self, path: Path) -> mmap.mmap:
        if self._source is None or self._source[0] != path:
            with path.open("rb") as handle:
                # Not closed explicitly: numpy views keep the map alive until the last of them is gone.
                self._source = (path, mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ))
        return self._source[1]

    def output(self, path: Path) -> int:
        if self._output is None or self._output[0] != path:
            self.close()
            self._output = (path, os.open(path, os.O_WRONLY))
        return self._output[1]

    def close(self) -> None:
        if self._output is not None:
            os.close(self._output[1])
            self._output = None


def _unmap_pages(mapped: mmap.mmap, begin: int, end: int) -> None:
    """Drop the pages of [begin, end) from this process's map: they stay in the page cache, but out of
    this process's memory. Each process has its own map, so a page shared with a neighbouring block
    that another process is reading is simply faulted in again there."""
    start = begin - begin % mmap.PAGESIZE
    stop = min(len(mapped), end + -end % mmap.PAGESIZE)
    if stop > start:
        mapped.madvise(mmap.MADV_DONTNEED, start, stop - start)


def _copy_piece(piece: Piece, progress: Progress) -> None:
    copy_tensor_to(piece.source, piece.info, piece.output, piece.output_at)
    progress.advance(piece.info.nbytes, piece.info.name)


class Progress:
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
