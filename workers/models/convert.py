"""Convert a model's FP32 weights to BF16 or FP16, shard by shard, block by block.

Only F32 tensors change; everything else (already half precision, integers) is copied as it is. Each
output shard keeps its input shard's name, so an existing model.safetensors.index.json stays valid
apart from total_size, which is rewritten.

    python -m workers.models.convert --dtype bfloat16|float16 SRC DST
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from workers.models.model_folder import (
    BadSourceError,
    copy_side_files,
    load_source,
    staged_output,
    write_json,
)
from workers.models.safetensors_io import (
    PlannedTensor,
    ShardWriter,
    copy_tensor_bytes,
    float32_to_bf16_bits,
    iter_row_blocks,
    write_index,
)

TARGETS = {"bfloat16": "BF16", "float16": "F16"}
BLOCK_BYTES = 4 * 1024 * 1024
# FP16 overflows past this; such weights would turn into infinities.
FLOAT16_MAX = 65504.0


def convert_dtype(source: str | Path, destination: str | Path, dtype: str) -> dict[str, Any]:
    """Write a copy of model `source` with its F32 tensors in `dtype`; return a short report."""
    if dtype not in TARGETS:
        raise BadSourceError(f"dtype must be one of {', '.join(TARGETS)}, not {dtype!r}")
    target = TARGETS[dtype]
    started = time.perf_counter()
    folder, config, shards = load_source(source)
    converted = 0
    output_bytes = 0
    with staged_output(destination) as staging:
        for shard_path, tensors in shards:
            planned = [
                PlannedTensor(info.name, target if info.dtype == "F32" else info.dtype, info.shape)
                for info in tensors
            ]
            with (
                shard_path.open("rb") as handle,
                ShardWriter(staging / shard_path.name, planned, {"format": "pt"}) as writer,
            ):
                for info in tensors:
                    writer.begin(info.name)
                    if info.dtype == "F32":
                        for _, block in iter_row_blocks(handle, info, BLOCK_BYTES):
                            writer.write_part(_narrow(block, target, info.name))
                        converted += 1
                    else:
                        copy_tensor_bytes(handle, info, writer.handle)
                        writer.mark_written(info.nbytes)
                    writer.end()
            output_bytes += sum(tensor.nbytes for tensor in planned)
        _rewrite_index(folder, staging, output_bytes)
        write_json(staging / "config.json", {**config, "torch_dtype": dtype})
        copy_side_files(folder, staging)
    return {
        "dtype": dtype,
        "source": str(folder),
        "destination": str(Path(destination)),
        "tensors_converted": converted,
        "output_bytes": output_bytes,
        "seconds": round(time.perf_counter() - started, 3),
    }


def _narrow(block: np.ndarray, target: str, name: str) -> np.ndarray:
    if target == "BF16":
        return float32_to_bf16_bits(block)
    if np.abs(block).max(initial=0.0) > FLOAT16_MAX:
        raise BadSourceError(f"{name} has values beyond the float16 range; convert to bfloat16 instead")
    return block.astype(np.float16)


def _rewrite_index(source: Path, staging: Path, total_size: int) -> None:
    for index_path in source.glob("*.safetensors.index.json"):
        weight_map = json.loads(index_path.read_text(encoding="utf-8"))["weight_map"]
        write_index(staging / index_path.name, weight_map, total_size)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m workers.models.convert", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--dtype", choices=sorted(TARGETS), required=True)
    parser.add_argument("source", type=Path)
    parser.add_argument("destination", type=Path)
    args = parser.parse_args(argv)
    try:
        report = convert_dtype(args.source, args.destination, args.dtype)
    except BadSourceError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
