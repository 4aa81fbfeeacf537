"""Quantize a Hugging Face safetensors model to W8A8_DYNAMIC, the layout vllm-ascend loads with
`--quantization ascend`, on CPU and without torch.

Every decoder linear weight becomes int8 `weight` [out, in] + float32 `weight_scale` and `weight_offset`
[out, 1]; everything else is copied unchanged, one output shard per input shard. The layout of every
output shard is known before any weight is read, so each file gets its header and full size first, and
then every piece lands at its own offset: float tensors are copied by the kernel (copy_file_range), and
weights are quantized in row blocks of about 4 MB straight from the memory-mapped source by forked
worker processes, each writing its int8 rows and scales with pwrite. Processes rather than threads: numpy
calls on cache-sized slices last ~10 µs, and two threads spent their time handing the GIL over, so two
threads quantized hardly faster than one. Memory stays at a few blocks per process: each block's source
pages are unmapped once it is written.

    python -m workers.models.quantize --scheme w8a8_dynamic SRC DST
        stderr: `progress <pct> <tensor>` lines; stdout: the report as JSON; exit 2 on a bad source
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from workers.models.model_folder import (
    QUANT_DESCRIPTION,
    BadSourceError,
    copy_side_files,
    load_source,
    staged_output,
    write_json,
)
from workers.models.quantize_blocks import (
    OutputPlan,
    Progress,
    ProgressCallback,
    process_count,
    write_tensors,
)
from workers.models.safetensors_io import (
    PlannedTensor,
    TensorInfo,
    shard_names,
    write_index,
)
from workers.models.w8a8 import (
    FLOAT_TYPE,
    QUANT_TYPE,
    is_quantized_linear,
    scale_and_offset_names,
)

OUTPUT_STEM = "quant_model_weights"
DESCRIPTION_VERSION = "1.0.0"
SCHEMES = ("w8a8_dynamic",)


def quantize_w8a8_dynamic(
    source: str | Path,
    destination: str | Path,
    on_progress: ProgressCallback | None = None,
    processes: int | None = None,
) -> dict[str, Any]:
    """Write the W8A8_DYNAMIC version of model `source` to `destination`; return the report.

    `processes` processes quantize the weights, this one included (default: one per core, or just this
    one for small models). The output is the same byte for byte however many there are.
    Raises BadSourceError when the source is not a quantizable model or the destination is taken.
    """
    started = time.perf_counter()
    folder, config, shards = load_source(source)
    if (folder / QUANT_DESCRIPTION).is_file():
        raise BadSourceError(f"{folder} is already quantized ({QUANT_DESCRIPTION} is present)")
    _reject_unquantizable(shards)
    total_bytes = sum(info.nbytes for _, tensors in shards for info in tensors) or 1
    progress = Progress(total_bytes, on_progress)
    description: dict[str, str] = {"model_quant_type": QUANT_TYPE, "version": DESCRIPTION_VERSION}
    weight_map: dict[str, str] = {}
    with staged_output(destination) as staging:
        names = shard_names(OUTPUT_STEM, len(shards))
        plan = OutputPlan()
        for (shard_path, tensors), output_name in zip(shards, names, strict=True):
            planned = _plan_output(tensors)
            plan.add_shard(shard_path, tensors, staging / output_name, planned)
            description.update(_describe(tensors))
            weight_map.update(dict.fromkeys((tensor.name for tensor in planned), output_name))
        processes = process_count(plan, processes)
        errors = write_tensors(plan, progress, processes)
        if len(names) > 1:
            write_index(staging / f"{OUTPUT_STEM}.safetensors.index.json", weight_map, plan.output_bytes)
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
        "output_bytes": plan.output_bytes,
        "output_shards": names,
        "copied_files": copied,
        "processes": processes,
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


def _quantized_config(config: dict[str, Any]) -> dict[str, Any]:
    # A leftover quantization_config (e.g. DeepSeek-V3's fp8) would make vLLM pick the wrong method.
    return {key: value for key, value in config.items() if key != "quantization_config"}


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
