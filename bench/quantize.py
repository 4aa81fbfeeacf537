"""Benchmark W8A8_DYNAMIC quantization against a plain copy of the same safetensors files.

For generated models of about 50 MB, 200 MB and 1 GB (BF16, ~100 MB shards, 1024 wide so rows look like
a real model's), it measures in the same run:
  - copy: read every shard and write it out again in 16 MB chunks — the I/O ceiling;
  - quantize: `quantize_w8a8_dynamic` in a fresh subprocess, reporting its peak RSS together with its
    worker processes' (see QUANTIZE_CHILD);
each --repeats times, interleaved, keeping the best speed of each (the machine may be shared).
Both phases start from the same state: source shards in the page cache, no dirty pages left by the other
phase (sync), and a burst of just-freed memory to write into. The last matters on VMs whose balloon device
hands memory that stays free for ~2 s back to the host (free page reporting; this one does): writing
into such pages costs a host page fault each — 512 MB took up to 1.5 s instead of 0.1 s, and the 1 GB
copy ran at 260-780 MB/s instead of ~2,200 when it did not follow a deletion. Before the burst, the copy
always ran right after the previous outputs were deleted, while quantize ran after the copy's sync.
The child runs with OPENBLAS_NUM_THREADS=1: the quantizer makes no BLAS call, but a fresh numpy import
leaves OpenBLAS's worker thread spinning for ~0.1 s — inside the timed run, taking one of two cores. An
agent that quantizes imported numpy long before, so that spin is the bench's, not the quantizer's.
Speeds are MB of source weights per second. Target: quantize >= half the copy speed and peak RSS under
twice the largest shard. The last line printed is JSON:
  {"sizes_mb", "quantize_mb_s", "copy_mb_s", "peak_rss_mb", ...}

    .venv/bin/python bench/quantize.py [--sizes 50 200 1024] [--workdir /tmp/bench-quantize]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from workers.models.safetensors_io import weight_files  # noqa: E402
from workers.models.tiny import make_tiny_model  # noqa: E402

MB = 1024 * 1024
SHARD_MB = 100
CHUNK = 16 * MB

# Runs in a fresh interpreter so its peak RSS belongs to the quantization alone.
# Peak RSS is read from VmHWM: unlike ru_maxrss, it starts afresh at exec and does not inherit the
# high-water mark of the (large) parent that generated the model.
# The quantizer forks worker processes, so peak RSS is the sum of the quantizing process's own peak and
# its workers': Linux reports only the largest peak among reaped children (ru_maxrss of RUSAGE_CHILDREN,
# which includes the pages a child inherited at fork), so each worker is counted at that largest peak.
# Pages shared with the parent (the interpreter, numpy) are counted once per process, so the sum
# overstates the real total.
QUANTIZE_CHILD = """
import json, re, resource, sys, time
from workers.models.quantize import quantize_w8a8_dynamic
def high_water_kb():
    with open("/proc/self/status") as status:
        return int(re.search(r"VmHWM:\\s+(\\d+)", status.read()).group(1))
baseline_kb = high_water_kb()
started = time.perf_counter()
report = quantize_w8a8_dynamic(sys.argv[1], sys.argv[2])
seconds = time.perf_counter() - started
own_kb = high_water_kb()
worker_kb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
peak_kb = own_kb + (report["processes"] - 1) * worker_kb
print(json.dumps({"seconds": seconds, "peak_kb": peak_kb, "baseline_kb": baseline_kb, "own_peak_kb": own_kb,
                  "worker_peak_kb": worker_kb, "max_relative_error": report["max_relative_error"]}))
"""


def plain_copy(source: Path, destination: Path) -> float:
    """Seconds to read and write every shard of `source`; the ceiling any rewrite of the weights has."""
    destination.mkdir(parents=True)
    started = time.perf_counter()
    buffer = bytearray(CHUNK)
    view = memoryview(buffer)
    for shard in weight_files(source):
        with shard.open("rb") as reader, (destination / shard.name).open("wb") as writer:
            while count := reader.readinto(buffer):
                writer.write(view[:count])
    return time.perf_counter() - started


def recycle_memory(workdir: Path, nbytes: int) -> None:
    """Write and delete a scratch file of nbytes, leaving that much memory just freed and still backed by
    the host for the timed phase that follows (see the module docstring). Deleted before writeback, so
    it leaves no dirty pages behind."""
    scratch = workdir / "recycle.scratch"
    chunk = bytes(CHUNK)
    with scratch.open("wb") as writer:
        for _ in range(math.ceil(nbytes / CHUNK)):
            writer.write(chunk)
    scratch.unlink()


def quantize_in_child(source: Path, destination: Path) -> dict:
    result = subprocess.run(
        [sys.executable, "-c", QUANTIZE_CHILD, str(source), str(destination)],
        capture_output=True,
        text=True,
        check=True,
        cwd=REPO_ROOT,
        env={**os.environ, "OPENBLAS_NUM_THREADS": "1"},
    )
    return json.loads(result.stdout.strip().splitlines()[-1])


def bench_size(size_mb: int, workdir: Path, repeats: int) -> dict:
    source = workdir / f"model-{size_mb}mb"
    shards = max(1, math.ceil(size_mb / SHARD_MB))
    make_tiny_model(source, arch="llama", hidden=1024, heads=32, kv_heads=8, target_mb=size_mb, shards=shards)
    files = weight_files(source)
    total_mb = sum(path.stat().st_size for path in files) / MB
    largest_mb = max(path.stat().st_size for path in files) / MB
    # Enough for either phase's output and buffers.
    recycle_bytes = int((total_mb + 64) * MB)
    copy_seconds, quantize_seconds, peak_kb, growth_kb, worker_kb, error = [], [], 0, 0, 0, 0.0
    for _ in range(repeats):
        # Interleaved and best-of-N, because other work on a shared machine makes single runs noisy.
        # Each timed phase starts with no dirty pages left from the one before and with freshly freed memory.
        for folder in (workdir / f"copy-{size_mb}mb", workdir / f"quant-{size_mb}mb"):
            shutil.rmtree(folder, ignore_errors=True)
        os.sync()
        recycle_memory(workdir, recycle_bytes)
        copy_seconds.append(plain_copy(source, workdir / f"copy-{size_mb}mb"))
        os.sync()
        recycle_memory(workdir, recycle_bytes)
        child = quantize_in_child(source, workdir / f"quant-{size_mb}mb")
        quantize_seconds.append(child["seconds"])
        peak_kb = max(peak_kb, child["peak_kb"])
        worker_kb = max(worker_kb, child["worker_peak_kb"])
        growth_kb = max(growth_kb, child["peak_kb"] - child["baseline_kb"])
        error = child["max_relative_error"]
    row = {
        "size_mb": round(total_mb, 1),
        "shards": len(files),
        "largest_shard_mb": round(largest_mb, 1),
        "copy_mb_s": round(total_mb / min(copy_seconds), 1),
        "quantize_mb_s": round(total_mb / min(quantize_seconds), 1),
        "copy_mb_s_runs": [round(total_mb / seconds, 1) for seconds in copy_seconds],
        "quantize_mb_s_runs": [round(total_mb / seconds, 1) for seconds in quantize_seconds],
        "peak_rss_mb": round(peak_kb / 1024, 1),
        "rss_growth_mb": round(growth_kb / 1024, 1),
        "worker_peak_rss_mb": round(worker_kb / 1024, 1),
        "max_relative_error": error,
    }
    row["half_copy_speed_met"] = row["quantize_mb_s"] >= row["copy_mb_s"] / 2
    row["rss_under_two_shards"] = row["peak_rss_mb"] < 2 * largest_mb
    for folder in (source, workdir / f"copy-{size_mb}mb", workdir / f"quant-{size_mb}mb"):
        shutil.rmtree(folder, ignore_errors=True)
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description="W8A8_DYNAMIC quantization speed and memory vs a plain copy")
    parser.add_argument("--sizes", type=int, nargs="+", default=[50, 200, 1024], help="model sizes in MB")
    parser.add_argument("--repeats", type=int, default=3, help="interleaved runs; the best of each counts")
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/bench-quantize"))
    args = parser.parse_args()
    shutil.rmtree(args.workdir, ignore_errors=True)
    args.workdir.mkdir(parents=True)
    rows = []
    for size in args.sizes:
        row = bench_size(size, args.workdir, args.repeats)
        print(json.dumps(row), flush=True)
        rows.append(row)
    shutil.rmtree(args.workdir, ignore_errors=True)
    summary = {
        "sizes_mb": [row["size_mb"] for row in rows],
        "quantize_mb_s": [row["quantize_mb_s"] for row in rows],
        "copy_mb_s": [row["copy_mb_s"] for row in rows],
        "peak_rss_mb": [row["peak_rss_mb"] for row in rows],
        "largest_shard_mb": [row["largest_shard_mb"] for row in rows],
        "targets_met": all(row["half_copy_speed_met"] and row["rss_under_two_shards"] for row in rows),
    }
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
