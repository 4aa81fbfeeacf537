"""Engines as managed processes on a host: start detached, remember, adopt, probe, stop.

An engine is started in its own session so it outlives the agent. What the agent knows about it lives in a
small JSON state file per deployment (pid, the process's start time, port, log file, argv), under
<host_root>/var/lib/ascend-panel/deployments/, and is also reported to the panel. After an agent (or panel)
restart an engine is adopted, not restarted, when its state file names a live process whose port answers
/health.

An engine is named by its pid and the start time the kernel gives that process (EngineRecord.pid_start),
never by a bare pid: a pid handed out again to another process is not the engine, and is never signalled.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import httpx

from workers.engine.running import readiness
from workers.hosts.base import Runner

STATE_SUBDIR = Path("var/lib/ascend-panel/deployments")
HTTP_TIMEOUT_S = 2.0
MAX_LOG_BYTES_PER_READ = 64 * 1024


class StopRefused(Exception):
    """A stop that names an engine other than the one recorded here, or a bare pid: nothing is stopped."""

    def __init__(self, message: str, hint: str = ""):
        super().__init__(message)
        self.hint = hint


@dataclass
class EngineRecord:
    """One running engine process, as written to its state file and reported to the panel."""

    name: str
    pid: int
    port: int
    log_path: str
    argv: list[str]
    started: float = field(default_factory=time.time)
    host: str = "127.0.0.1"
    # When the process started, in clock ticks after boot (Runner.process_start); 0 in records of older
    # agents, whose pid alone is then trusted as this agent's own record says.
    pid_start: int = 0

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> EngineRecord:
        return cls(
            name=str(data["name"]),
            pid=int(data["pid"]),
            port=int(data["port"]),
            log_path=str(data["log_path"]),
            argv=list(data.get("argv") or []),
            started=float(data.get("started") or 0.0),
            host=str(data.get("host") or "127.0.0.1"),
            pid_start=int(data.get("pid_start") or 0),
        )

    def same_engine(self, other: EngineRecord) -> bool:
        return (self.pid, self.pid_start) == (other.pid, other.pid_start)

    @property
    def base_url(self) -> str:
        # An engine listening on every address is reached on loopback from its own host.
        host = "127.0.0.1" if self.host in ("0.0.0.0", "::") else self.host  # noqa: S104
        return f"http://{host}:{self.port}"


def state_dir(host_root: str) -> Path:
    return Path(host_root) / STATE_SUBDIR


def state_path(host_root: str, name: str) -> Path:
    return state_dir(host_root) / f"{name}.json"


def log_path_for(host_root: str, name: str) -> str:
    return str((state_dir(host_root) / f"{name}.log").resolve())


def load_record(host_root: str, name: str) -> EngineRecord | None:
    path = state_path(host_root, name)
    try:
        return EngineRecord.from_dict(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def save_record(host_root: str, record: EngineRecord) -> None:
    path = state_path(host_root, record.name)
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.tmp")
    temporary.write_text(json.dumps(record.to_dict(), indent=2) + "\n", encoding="utf-8")
    os.replace(temporary, path)


def forget_record(host_root: str, name: str) -> None:
    state_path(host_root, name).unlink(missing_ok=True)


async def start_engine(
    runner: Runner, host_root: str, name: str, argv: list[str], env: dict[str, str], log_path: str, port: int,
    host: str = "127.0.0.1",
) -> EngineRecord:  # fmt: skip
    """Start argv detached, its output appended to log_path, and record it in the state file."""
    Path(log_path).parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "a", encoding="utf-8") as log:
        log.write(f"--- ascend-panel: starting {name} at {time.strftime('%Y-%m-%d %H:%M:%S')}\n")
    pid = await runner.start_detached(argv, env=env, log_path=log_path)
    record = EngineRecord(
        name=name,
        pid=pid,
        port=port,
        log_path=log_path,
        argv=argv,
        host=host,
        pid_start=await runner.process_start(pid) or 0,
    )
    save_record(host_root, record)
    return record


async def engine_state(runner: Runner, record: EngineRecord) -> str:
    """'alive' (the recorded process runs), 'gone' (no process has its pid), or 'other' (the pid belongs to
    another process now: the engine ended and the kernel handed its pid out again)."""
    if not await runner.is_alive(record.pid):
        return "gone"
    if record.pid_start and await runner.process_start(record.pid) != record.pid_start:
        return "other"
    return "alive"


async def is_alive(runner: Runner, record: EngineRecord) -> bool:
    return await engine_state(runner, record) == "alive"


async def stop_engine(runner: Runner, record: EngineRecord, grace_s: float) -> str:
    """SIGTERM the engine's process group, SIGKILL it after grace_s; 'stopped', 'killed' or 'not running'.
    Only the recorded process is signalled: a pid now held by another process is left alone."""
    state = await engine_state(runner, record)
    if state == "other":
        return "not running"
    if state == "gone":
        # Its workers may still hold the group; the kernel hands out no pid while its group lives.
        await end_orphaned_group(runner, record.pid)
        return "not running"
    await runner.signal(record.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        if not await is_alive(runner, record):
            return "stopped"
        await asyncio.sleep(0.2)
    await runner.signal(record.pid, signal.SIGKILL)
    for _attempt in range(50):
        if not await runner.is_alive(record.pid):
            break
        await asyncio.sleep(0.1)
    return "killed"


async def end_orphaned_group(runner: Runner, pgid: int) -> None:
    """An engine killed with -9 leaves its workers (vLLM's EngineCore) running in its process group,
    holding NPU memory. pkill -g addresses that group only, so a reused pid can never be hit."""
    await runner.run(["pkill", "-KILL", "-g", str(int(pgid))], timeout=10)


async def http_status(url: str, timeout: float = HTTP_TIMEOUT_S) -> int | None:
    """The HTTP status of GET url, or None when nothing answers."""
    try:
        async with httpx.AsyncClient(timeout=timeout, trust_env=False) as client:
            return (await client.get(url)).status_code
    except httpx.HTTPError:
        return None


def auth_headers(api_key: str) -> dict[str, str]:
    """What an engine started with VLLM_API_KEY wants on /v1/* (vLLM leaves /health and /metrics open)."""
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


async def http_text(url: str, timeout: float = HTTP_TIMEOUT_S, api_key: str = "") -> str | None:
    try:
        async with httpx.AsyncClient(timeout=timeout, trust_env=False) as client:
            response = await client.get(url, headers=auth_headers(api_key))
    except httpx.HTTPError:
        return None
    return response.text if response.status_code == 200 else None


async def is_healthy(record) -> bool:
    return await http_status(f"{record.base_url}/health") == 200


async def serves_model(record, served_name: str, api_key: str = "") -> bool:
    """/v1/models lists served_name: the OpenAI API is really up, and it is this engine answering."""
    text = await http_text(f"{record.base_url}/v1/models", api_key=api_key)
    if text is None:
        return False
    try:
        return any(model.get("id") == served_name for model in json.loads(text).get("data") or [])
    except (ValueError, AttributeError):
        return False


async def first_request(
    runner: Runner, record, served_name: str, api_key: str = "", *, log: Callable[[str], object] | None = None
) -> readiness.FirstRequest:
    """Ask the engine for one token while watching its process (/health alone does not show the model runs);
    `log` is told what is asked and how it went."""
    say = log or (lambda _line: None)
    say(f"first request: one token of {served_name} (/health alone does not show the model runs)")
    check = await readiness.check_first_request(
        runner, record.pid, record.base_url, served_name, api_key=api_key
    )
    say("first request: answered" if check.ok else f"first request failed: {check.detail}")
    return check


async def adoptable(
    runner: Runner,
    record,
    served_name: str,
    api_key: str = "",
    *,
    follower: bool = False,
    log: Callable[[str], object] | None = None,
) -> bool:
    """The one liveness check of an engine found running, a process's or a container's (`record`: its pid
    and base_url): it is kept rather than started again while its process runs and, a leader, it answers
    /health and one real request with the key the panel holds now (one started with another key is started
    again). A headless follower has no /health: running is enough."""
    if record is None or not await runner.is_alive(record.pid):
        return False
    if follower:
        return True
    if not await is_healthy(record):
        return False
    return (await first_request(runner, record, served_name, api_key, log=log)).ok


def read_log(path: str, offset: int, max_bytes: int = MAX_LOG_BYTES_PER_READ) -> tuple[list[str], int]:
    """Whole lines appended to the log since offset, and the offset after them.

    A log that shrank (rotated or truncated) is read again from its start. A partial last line waits for
    the next read.
    """
    try:
        with open(path, "rb") as log:
            size = log.seek(0, os.SEEK_END)
            if offset > size:
                offset = 0
            log.seek(offset)
            data = log.read(max_bytes)
    except OSError:
        return [], offset
    end = data.rfind(b"\n")
    if end < 0:
        # A single line longer than max_bytes is passed on in pieces rather than never.
        if len(data) < max_bytes:
            return [], offset
        end = len(data) - 1
    chunk = data[: end + 1]
    lines = chunk.decode("utf-8", errors="replace").splitlines()
    return lines, offset + len(chunk)


def tail_lines(path: str, count: int = 40) -> list[str]:
    try:
        with open(path, "rb") as log:
            size = log.seek(0, os.SEEK_END)
            log.seek(max(0, size - 64 * 1024))
            data = log.read()
    except OSError:
        return []
    return data.decode("utf-8", errors="replace").splitlines()[-count:]
