"""Collect what a failed start leaves on a node into one tar.gz: the engine log, `npu-smi info`, the installed
versions, the environment, the kernel log tail, CANN's plog (~/ascend/log) and device logs where present,
and a manifest with this node's clock and what diagnose found.

`collect(runner, request, host_root, ascend_root, node)` returns (archive bytes, manifest). The request:
    name        the deployment (its engine log is the agent's <state dir>/<name>.log)
    env         the environment the panel launched the engine with (shown as sent, secrets left out)
    home        where the engine's ~ is (default: this process's HOME); plog lives in ~/ascend/log
The manifest: {"node", "deployment", "collected_at" (UTC, this host's clock), "utc_offset_s" (its local
time zone, which log lines are written in), "files": {name: bytes}, "skipped": {name: why},
"findings", "first_rank"}. Files are read inside host_root, so a sim host works as a real one.
Sizes are capped: the newest plog files first, tails of long files, the whole archive a few tens of MB.
"""

from __future__ import annotations

import io
import json
import os
import re
import tarfile
import time
from datetime import UTC, datetime
from pathlib import Path

from workers.ascend.diagnose import diagnose_lines
from workers.ascend.npu_smi import npu_smi_argv
from workers.ascend.ranks import first_failing_rank
from workers.ascend.versions import find_versions
from workers.engine.running import runtime

ENGINE_LOG_BYTES = 8 * 1024 * 1024
FILE_TAIL_BYTES = 2 * 1024 * 1024
LOG_TREE_BYTES = 24 * 1024 * 1024
LOG_TREE_FILES = 200
KERNEL_LOG_LINES = 500
COMMAND_TIMEOUT_S = 60
# Environment variables an engine's behaviour depends on; anything that looks like a secret is left out.
ENV_PREFIXES = (
    "ASCEND_",
    "HCCL_",
    "GLOO_",
    "TP_",
    "VLLM_",
    "PYTORCH_",
    "TORCH_",
    "OMP_",
    "TASK_QUEUE",
    "ATB_",
)
ENV_NAMES = ("LD_LIBRARY_PATH", "PATH", "PYTHONPATH", "CPU_AFFINITY_CONF", "HOME")
SECRET = re.compile(r"(?i)KEY|TOKEN|SECRET|PASSWORD|CREDENTIAL")


def _inside(host_root: str, path: str | os.PathLike) -> Path:
    return Path(host_root) / str(path).lstrip("/")


def _tail(path: Path, limit: int) -> bytes:
    with open(path, "rb") as handle:
        size = handle.seek(0, os.SEEK_END)
        handle.seek(max(0, size - limit))
        return handle.read()


def environment_text(env: dict[str, str]) -> str:
    """The launch environment and this agent's own engine-relevant variables, secrets left out."""
    lines = ["# the environment the panel launched the engine with"]
    lines += [f"{k}={v}" for k, v in sorted(env.items()) if not SECRET.search(k)]
    lines.append("# the agent's environment, which the engine inherits")
    lines += [
        f"{k}={v}"
        for k, v in sorted(os.environ.items())
        if (k.startswith(ENV_PREFIXES) or k in ENV_NAMES) and not SECRET.search(k)
    ]
    return "\n".join(lines) + "\n"


def log_trees(host_root: str, home: str, env: dict[str, str]) -> list[tuple[str, Path]]:
    """(name in the archive, folder) of CANN's logs: ~/ascend/log (or ASCEND_PROCESS_LOG_PATH) and the
    driver's device logs in /var/log/npu/slog."""
    plog = (
        env.get("ASCEND_PROCESS_LOG_PATH")
        or os.environ.get("ASCEND_PROCESS_LOG_PATH")
        or f"{home}/ascend/log"
    )
    return [("plog", _inside(host_root, plog)), ("device-logs", _inside(host_root, "/var/log/npu/slog"))]


def newest_files(folder: Path) -> list[Path]:
    if not folder.is_dir():
        return []
    files = [path for path in folder.rglob("*") if path.is_file() and not path.is_symlink()]
    return sorted(files, key=lambda path: path.stat().st_mtime, reverse=True)[:LOG_TREE_FILES]


async def _command(runner, argv: list[str]) -> bytes:
    done = await runner.run(argv, timeout=COMMAND_TIMEOUT_S)
    text = (
        done.stdout if done.ok else f"$ {' '.join(argv)}\nexit {done.exit_status}\n{done.stdout}{done.stderr}"
    )
    return text.encode()


async def collect(runner, request: dict, host_root: str, ascend_root: str, node: str) -> tuple[bytes, dict]:
    name = str(request.get("name") or "")
    env = {str(k): str(v) for k, v in (request.get("env") or {}).items()}
    home = str(request.get("home") or os.environ.get("HOME") or "/root")
    files: dict[str, bytes] = {}
    skipped: dict[str, str] = {}

    engine_log = Path(runtime.log_path_for(host_root, name)) if name else None
    lines: list[str] = []
    if engine_log is not None and engine_log.is_file():
        files["engine.log"] = _tail(engine_log, ENGINE_LOG_BYTES)
        lines = files["engine.log"].decode("utf-8", errors="replace").splitlines()
    else:
        skipped["engine.log"] = f"no engine log at {engine_log}"
    files["npu-smi-info.txt"] = await _command(runner, npu_smi_argv("table"))
    files["versions.json"] = json.dumps(
        await find_versions(runner, ascend_root), indent=2, default=str
    ).encode()
    files["environment.txt"] = environment_text(env).encode()
    kernel = await runner.run(["dmesg", "-T"], timeout=COMMAND_TIMEOUT_S)
    if kernel.ok:
        files["kernel.log"] = "\n".join(kernel.stdout.splitlines()[-KERNEL_LOG_LINES:]).encode() + b"\n"
    else:
        skipped["kernel.log"] = (
            kernel.stderr or kernel.stdout or f"dmesg exit {kernel.exit_status}"
        ).strip()[:300]

    budget = LOG_TREE_BYTES
    for prefix, folder in log_trees(host_root, home, env):
        found = newest_files(folder)
        if not found:
            skipped[prefix] = f"nothing in {folder}"
        for path in found:
            if budget <= 0:
                skipped[prefix] = "size budget reached; older files left out"
                break
            data = _tail(path, min(FILE_TAIL_BYTES, budget))
            files[f"{prefix}/{path.relative_to(folder)}"] = data
            budget -= len(data)

    manifest = {
        "node": node,
        "deployment": name,
        "collected_at": datetime.now(UTC).isoformat(),
        "utc_offset_s": -time.altzone if time.localtime().tm_isdst > 0 else -time.timezone,
        "files": {key: len(value) for key, value in files.items()},
        "skipped": skipped,
        "findings": diagnose_lines(lines[-2000:]),
        "first_rank": first_failing_rank(lines[-2000:]),
    }
    return archive(files, manifest, prefix=node), manifest


def archive(files: dict[str, bytes], manifest: dict, prefix: str) -> bytes:
    """A tar.gz of the files under `prefix`/, with manifest.json."""
    buffer = io.BytesIO()
    now = time.time()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name, data in [("manifest.json", json.dumps(manifest, indent=2).encode()), *files.items()]:
            entry = tarfile.TarInfo(f"{prefix}/{name}")
            entry.size, entry.mtime, entry.mode = len(data), now, 0o644
            tar.addfile(entry, io.BytesIO(data))
    return buffer.getvalue()
