"""Read and write safetensors files with numpy only, one tensor at a time.

There is no torch on the agent, and numpy has no bfloat16, so the safetensors library cannot hand out
BF16 tensors as numpy arrays. The format is simple enough to handle directly: an 8-byte little-endian
header length, a JSON header mapping each tensor to its dtype, shape and byte range, then the raw bytes.
Reading tensor by tensor and writing tensor by tensor keeps memory bounded by the largest tensor.
"""

from __future__ import annotations

import io
import json
import mmap
import os
import struct
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import numpy as np

# Bytes per element of every dtype the safetensors format names.
DTYPE_BYTES = {
    "BOOL": 1,
    "U8": 1,
    "I8": 1,
    "F8_E4M3": 1,
    "F8_E5M2": 1,
    "I16": 2,
    "U16": 2,
    "F16": 2,
    "BF16": 2,
    "I32": 4,
    "U32": 4,
    "F32": 4,
    "I64": 8,
    "U64": 8,
    "F64": 8,
}

# How each dtype is held in numpy; BF16 and FP8 are kept as raw bit patterns.
STORAGE_NUMPY = {
    "BOOL": np.bool_,
    "U8": np.uint8,
    "I8": np.int8,
    "F8_E4M3": np.uint8,
    "F8_E5M2": np.uint8,
    "I16": np.int16,
    "U16": np.uint16,
    "F16": np.float16,
    "BF16": np.uint16,
    "I32": np.int32,
    "U32": np.uint32,
    "F32": np.float32,
    "I64": np.int64,
    "U64": np.uint64,
    "F64": np.float64,
}

# A real header is at most a few MB; anything larger means the file is not safetensors.
MAX_HEADER_BYTES = 100 * 1024 * 1024
COPY_CHUNK_BYTES = 16 * 1024 * 1024


class SafetensorsFormatError(ValueError):
    """The file is not a readable safetensors file."""


@dataclass(frozen=True)
class TensorInfo:
    name: str
    dtype: str
    shape: tuple[int, ...]
    begin: int  # absolute byte offset in the file
    end: int

    @property
    def nbytes(self) -> int:
        return self.end - self.begin

    @property
    def numel(self) -> int:
        count = 1
        for dim in self.shape:
            count *= dim
        return count


def read_header(path: str | Path) -> tuple[list[TensorInfo], dict[str, str]]:
    """Tensors of a safetensors file in file order, and its __metadata__, without reading any weights."""
    path = Path(path)
    with path.open("rb") as handle:
        raw_length = handle.read(8)
        if len(raw_length) != 8:
            raise SafetensorsFormatError(f"{path}: too short to be a safetensors file")
        (header_length,) = struct.unpack("<Q", raw_length)
        if header_length > MAX_HEADER_BYTES:
            raise SafetensorsFormatError(f"{path}: header length {header_length} is not plausible")
        try:
            header = json.loads(handle.read(header_length))
        except (UnicodeDecodeError, json.JSONDecodeError) as error:
            raise SafetensorsFormatError(f"{path}: header is not JSON ({error})") from error
    if not isinstance(header, dict):
        raise SafetensorsFormatError(f"{path}: header is not a JSON object")
    data_start = 8 + header_length
    metadata = header.pop("__metadata__", None) or {}
    tensors = []
    for name, entry in header.items():
        dtype = entry.get("dtype")
        if dtype not in DTYPE_BYTES:
            raise SafetensorsFormatError(f"{path}: tensor {name} has unknown dtype {dtype!r}")
        begin, end = entry["data_offsets"]
        tensors.append(TensorInfo(name, dtype, tuple(entry["shape"]), data_start + begin, data_start + end))
    tensors.sort(key=lambda info: info.begin)
    return tensors, metadata


def read_tensor(handle: io.BufferedIOBase, info: TensorInfo) -> np.ndarray:
    """One tensor in its storage dtype (BF16 as uint16 bit patterns), shaped as declared."""
    handle.seek(info.begin)
    buffer = bytearray(info.nbytes)
    if handle.readinto(buffer) != info.nbytes:
        raise SafetensorsFormatError(f"tensor {info.name} is truncated")
    return np.frombuffer(buffer, dtype=STORAGE_NUMPY[info.dtype]).reshape(info.shape)


def iter_row_blocks(handle: io.BufferedIOBase, info: TensorInfo, block_bytes: int = COPY_CHUNK_BYTES):
    """Yield (first_row, block) over a tensor's leading dimension, each block about block_bytes.

    1-D tensors come as one row. Reading block by block keeps memory to one block, however big the tensor.
    """
    rows = info.shape[0] if len(info.shape) > 1 else 1
    row_shape = info.shape[1:] if len(info.shape) > 1 else info.shape
    row_bytes = info.nbytes // rows if rows else 0
    if row_bytes == 0:
        return
    rows_per_block = max(1, block_bytes // row_bytes)
    storage = STORAGE_NUMPY[info.dtype]
    for first in range(0, rows, rows_per_block):
        count = min(rows_per_block, rows - first)
        handle.seek(info.begin + first * row_bytes)
        buffer = bytearray(count * row_bytes)
        if handle.readinto(buffer) != len(buffer):
            raise SafetensorsFormatError(f"tensor {info.name} is truncated")
        yield first, np.frombuffer(buffer, dtype=storage).reshape((count, *row_shape))


def map_tensor(mapped: mmap.mmap, info: TensorInfo) -> np.ndarray:
    """One tensor of a memory-mapped safetensors file, in its storage dtype, shaped as declared, without
    reading it: pages are read from the page cache as they are touched."""
    if info.end > len(mapped):
        raise SafetensorsFormatError(f"tensor {info.name} is truncated")
    storage = STORAGE_NUMPY[info.dtype]
    return np.frombuffer(mapped, dtype=storage, count=info.numel, offset=info.begin).reshape(info.shape)


def copy_tensor_bytes(source: BinaryIO, info: TensorInfo, destination: BinaryIO) -> None:
    """Copy one tensor unchanged, in chunks, so a huge embedding never sits in memory whole."""
    source.seek(info.begin)
    remaining = info.nbytes
    while remaining:
        chunk = source.read(min(remaining, COPY_CHUNK_BYTES))
        if not chunk:
            raise SafetensorsFormatError(f"tensor {info.name} is truncated")
        destination.write(chunk)
        remaining -= len(chunk)


def copy_tensor_to(source: Path, info: TensorInfo, destination: Path, offset: int) -> None:
    """Copy one tensor unchanged to `offset` in an existing file, inside the kernel where it can
    (copy_file_range: no trip through this process's memory), else in chunks through a buffer."""
    with source.open("rb") as reader, destination.open("r+b") as writer:
        copied = 0
        try:
            while copied < info.nbytes:
                count = os.copy_file_range(
                    reader.fileno(),
                    writer.fileno(),
                    min(info.nbytes - copied, COPY_CHUNK_BYTES),
                    info.begin + copied,
                    offset + copied,
                )
                if not count:
                    raise SafetensorsFormatError(f"tensor {info.name} is truncated")
                copied += count
        except OSError:  # no copy_file_range between these two files (kernel or file system)
            reader.seek(info.begin + copied)
            writer.seek(offset + copied)
            while copied < info.nbytes:
                chunk = reader.read(min(info.nbytes - copied, COPY_CHUNK_BYTES))
                if not chunk:
                    raise SafetensorsFormatError(f"tensor {info.name} is truncated") from None
                writer.write(chunk)
                copied += len(chunk)


def write_array_at(descriptor: int, array: np.ndarray, offset: int) -> None:
    """Write an array's bytes at `offset` of an open file, whoever else is writing elsewhere in it."""
    view = np.ascontiguousarray(array).data.cast("B")
    while view:
        written = os.pwrite(descriptor, view, offset)
        view, offset = view[written:], offset + written


def bf16_bits_to_float32(bits: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """BF16 is the top half of a float32: widen the bit pattern and shift it into place."""
    widened = np.empty(bits.shape, dtype=np.uint32) if out is None else out.view(np.uint32)
    # A widening copy and an in-place shift are quicker than one shift ufunc that has to cast its input.
    np.copyto(widened, bits)
    np.left_shift(widened, 16, out=widened)
    return widened.view(np.float32)


def float32_to_bf16_bits(values: np.ndarray) -> np.ndarray:
    """Round float32 to the nearest BF16 (ties to even), as uint16 bit patterns; NaN stays NaN."""
    bits = np.ascontiguousarray(values, dtype=np.float32).view(np.uint32)
    rounding_bias = ((bits >> 16) & 1) + np.uint32(0x7FFF)
    rounded = ((bits + rounding_bias) >> 16).astype(np.uint16)
    nan = np.isnan(values)
    if nan.any():
        rounded[nan] = 0x7FC0
    return rounded


def to_float32(array: np.ndarray, dtype: str) -> np.ndarray:
    """A tensor read with read_tensor, as float32."""
    if dtype == "BF16":
        return bf16_bits_to_float32(array)
    if dtype in ("F16", "F32", "F64"):
        return array.astype(np.float32, copy=False)
    raise ValueError(f"cannot widen {dtype} to float32")


@dataclass(frozen=True)
class PlannedTensor:
    name: str
    dtype: str
    shape: tuple[int, ...]

    @property
    def nbytes(self) -> int:
        count = DTYPE_BYTES[self.dtype]
        for dim in self.shape:
            count *= dim
        return count


def encode_header(
    planned: Iterable[PlannedTensor], metadata: dict[str, str] | None
) -> tuple[bytes, dict[str, int]]:
    """The bytes a safetensors file starts with (length, JSON header, padding) for tensors stored in
    the given order, and the absolute file offset at which each tensor's data begins."""
    planned = list(planned)
    header: dict[str, object] = {}
    if metadata:
        header["__metadata__"] = metadata
    offset = 0
    relative = {}
    for tensor in planned:
        header[tensor.name] = {
            "dtype": tensor.dtype,
            "shape": list(tensor.shape),
            "data_offsets": [offset, offset + tensor.nbytes],
        }
        relative[tensor.name] = offset
        offset += tensor.nbytes
    encoded = json.dumps(header, separators=(",", ":")).encode()
    # Pad with spaces so the data starts 8-byte aligned, as the reference writer does.
    encoded += b" " * (-len(encoded) % 8)
    data_start = 8 + len(encoded)
    return (
        struct.pack("<Q", len(encoded)) + encoded,
        {name: data_start + at for name, at in relative.items()},
    )


class ShardWriter:
    """Writes a safetensors file whose tensors are all declared up front and then streamed in order.

    Declaring shapes first lets the header go out before any data, so the caller never holds more than
    the tensor it is writing.
    """

    def __init__(self, path: str | Path, planned: Iterable[PlannedTensor], metadata: dict[str, str] | None):
        self.path = Path(path)
        self._planned = list(planned)
        self._next = 0
        self._written_in_current = 0
        self._handle = self.path.open("wb")
        self._handle.write(encode_header(self._planned, metadata)[0])

    @property
    def handle(self) -> BinaryIO:
        return self._handle

    def write(self, name: str, array: np.ndarray) -> None:
        """Write the whole of the next planned tensor."""
        self.begin(name)
        self.write_part(array)
        self.end()

    def begin(self, name: str) -> PlannedTensor:
        expected = self._planned[self._next]
        if expected.name != name:
            raise ValueError(f"tensor {name} written out of order; expected {expected.name}")
        self._written_in_current = 0
        return expected

    def write_part(self, array: np.ndarray) -> None:
        data = np.ascontiguousarray(array)
        self._handle.write(data.data.cast("B"))
        self._written_in_current += data.nbytes

    def mark_written(self, nbytes: int) -> None:
        """Account for bytes the caller wrote to handle directly (chunked copies)."""
        self._written_in_current += nbytes

    def end(self) -> None:
        expected = self._planned[self._next]
        if self._written_in_current != expected.nbytes:
            raise ValueError(
                f"tensor {expected.name}: wrote {self._written_in_current} bytes, planned {expected.nbytes}"
            )
        self._next += 1

    def close(self) -> None:
        self._handle.close()
        if self._next != len(self._planned):
            missing = self._planned[self._next].name
            raise ValueError(f"{self.path}: closed before tensor {missing} was written")

    def __enter__(self) -> ShardWriter:
        return self

    def __exit__(self, exc_type, exc, traceback) -> None:
        if exc_type is None:
            self.close()
        else:
            self._handle.close()


def weight_files(folder: Path) -> list[Path]:
    """The safetensors weight files of a model folder, in name order."""
    return sorted(path for path in folder.glob("*.safetensors") if path.is_file())


def shard_names(stem: str, count: int) -> list[str]:
    """File names for `count` shards in the Hugging Face pattern (a single shard keeps the plain name)."""
    if count == 1:
        return [f"{stem}.safetensors"]
    return [f"{stem}-{number:05d}-of-{count:05d}.safetensors" for number in range(1, count + 1)]


def write_index(path: Path, weight_map: dict[str, str], total_size: int) -> None:
    """The *.safetensors.index.json that tells loaders which shard holds each tensor."""
    index = {"metadata": {"total_size": total_size}, "weight_map": dict(sorted(weight_map.items()))}
    path.write_text(json.dumps(index, indent=2))


def split_evenly(planned: list[PlannedTensor], count: int) -> list[list[PlannedTensor]]:
    """Cut the tensor list, in order, into `count` runs of roughly equal bytes, none empty."""
    if not 1 <= count <= len(planned):
        raise ValueError(f"cannot split {len(planned)} tensors into {count} shards")
    total = max(sum(tensor.nbytes for tensor in planned), 1)
    shards: list[list[PlannedTensor]] = [[] for _ in range(count)]
    current = -1
    running = 0
    for position, tensor in enumerate(planned):
        wanted = running * count // total
        # No gaps (at most one step forward) and enough tensors left for every later shard.
        must_reach = count - (len(planned) - position)
        current = max(min(wanted, current + 1), must_reach, current, 0)
        shards[current].append(tensor)
        running += tensor.nbytes
    return shards
