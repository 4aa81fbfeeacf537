"""Engine containers: start, record, inspect, find by label, stop with grace then kill, remove.

What the agent knows about a deployment's container lives in <host_root>/var/lib/ascend-panel/deployments/
<name>.container.json (beside the process runtime's records) and is reported to the panel. Every container
carries the labels ascend-panel.deployment / .node / .launch, so after an agent restart (or with its record
lost) a deployment's container is found again by label and adopted while it still runs the same launch.
Its output is kept by a detached `logs -f` follower (workers.containers.follow) in the deployment's log.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from workers.containers import commands
from workers.containers.follow import split_stamp
from workers.containers.parse import ContainerState, parse_inspect
from workers.engine.launch.container import ContainerRun
from workers.engine.running import runtime
from workers.hosts.base import CommandError
from workers.i18n import gettext_noop as _

RUN_TIMEOUT_S = 600  # `run` unpacks the image's layers first when they are not yet
COMMAND_TIMEOUT_S = 60
EXIT_KILLED = 137  # 128 + SIGKILL: what an engine killed after its grace (or by the OOM killer) exits with


@dataclass
class ContainerRecord:
    name: str  # the deployment
    engine: str
    container_id: str
    container_name: str
    image: str
    port: int
    log_path: str
    argv: list[str]
    launch_digest: str
    host: str = "127.0.0.1"
    pid: int = 0  # the container's first process as the host numbers it (readiness watches it)
    logs_pid: int = 0  # the `logs -f` follower
    started: float = field(default_factory=time.time)
    kind: str = "container"

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> ContainerRecord:
        known = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in data.items() if k in known})

    @property
    def base_url(self) -> str:
        host = "127.0.0.1" if self.host in ("0.0.0.0", "::") else self.host  # noqa: S104
        return f"http://{host}:{self.port}"


def container_name(deployment: str) -> str:
    return f"ascend-panel-{deployment}"


def launch_digest(argv: list[str]) -> str:
    """What identifies a launch: its run line without the digest label itself."""
    return hashlib.sha256(json.dumps(argv).encode()).hexdigest()[:16]


def labels(deployment: str, node: str, digest: str) -> tuple[tuple[str, str], ...]:
    return (
        (commands.LABEL_DEPLOYMENT, deployment),
        (commands.LABEL_NODE, node),
        (commands.LABEL_LAUNCH, digest),
    )


def record_path(host_root: str, name: str) -> Path:
    return runtime.state_dir(host_root) / f"{name}.container.json"


def load_record(host_root: str, name: str) -> ContainerRecord | None:
    try:
        return ContainerRecord.from_dict(json.loads(record_path(host_root, name).read_text(encoding="utf-8")))
    except (OSError, ValueError, TypeError):
        return None


def save_record(host_root: str, record: ContainerRecord) -> None:
    path = record_path(host_root, record.name)
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.tmp")
    temporary.write_text(json.dumps(record.to_dict(), indent=2) + "\n", encoding="utf-8")
    os.replace(temporary, path)


def forget_record(host_root: str, name: str) -> None:
    record_path(host_root, name).unlink(missing_ok=True)


def env_file_path(host_root: str, name: str) -> str:
    return str((runtime.state_dir(host_root) / f".{name}.env").resolve())


async def inspect(runner, engine: str, ref: str) -> ContainerState | None:
    result = await runner.run(commands.inspect(engine, ref), timeout=COMMAND_TIMEOUT_S)
    return parse_inspect(result.stdout) if result.ok else None


async def find_labelled(runner, engine: str, deployment: str) -> list[ContainerState]:
    """Every container of this deployment on the host, newest first as the engine lists them."""
    result = await runner.run(
        commands.find_by_label(engine, commands.LABEL_DEPLOYMENT, deployment), timeout=COMMAND_TIMEOUT_S
    )
    states = []
    for container_id in result.stdout.split() if result.ok else []:
        state = await inspect(runner, engine, container_id)
        if state is not None:
            states.append(state)
    return states


async def start(
    runner, host_root: str, record: ContainerRecord, run: ContainerRun, env_file: str | None
) -> ContainerRecord:
    """`run -d`, then record the container (its id and host pid) and start its log follower."""
    Path(record.log_path).parent.mkdir(parents=True, exist_ok=True)
    with open(record.log_path, "a", encoding="utf-8") as log:
        when = time.strftime("%Y-%m-%d %H:%M:%S")
        log.write(f"--- ascend-panel: starting container {record.container_name} at {when}\n")
    if run.env_file_text is not None:
        _write_private(env_file, run.env_file_text)
    try:
        result = await runner.run(run.argv, env=run.cli_env, timeout=RUN_TIMEOUT_S)
    finally:
        if env_file:
            Path(env_file).unlink(missing_ok=True)  # iSula read it; the secret stays nowhere on disk
    if not result.ok:
        raise CommandError(result)
    record.container_id = result.stdout.strip().splitlines()[-1].strip()
    state = await inspect(runner, record.engine, record.container_id)
    record.pid = state.pid if state else 0
    record.started = time.time()
    record.logs_pid = await start_follower(runner, record)
    save_record(host_root, record)
    return record


def _write_private(path: str | None, text: str) -> None:
    if not path:
        raise ValueError("an env file path is needed to hand iSula the values passed by name")
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
        handle.write(text)


async def start_follower(runner, record: ContainerRecord) -> int:
    argv = [
        sys.executable,
        "-m",
        "workers.containers.follow",
        record.engine,
        record.container_id,
        record.log_path,
    ]
    return await runner.start_detached(argv, log_path=f"{record.log_path}.follower")


async def keep_following(runner, record: ContainerRecord) -> bool:
    """Start the follower again when it is gone while the container runs (an adopted container). True
    when a new one was started."""
    if record.logs_pid and await runner.is_alive(record.logs_pid):
        return False
    record.logs_pid = await start_follower(runner, record)
    return True


async def stop(runner, record: ContainerRecord, grace_s: float) -> tuple[str, ContainerState | None]:
    """SIGTERM, SIGKILL after grace_s ('stopped' or 'killed'); 'not running' when it had ended."""
    state = await inspect(runner, record.engine, record.container_id)
    if state is None or not state.running:
        return "not running", state
    result = await runner.run(
        commands.stop(record.engine, record.container_id, grace_s), timeout=grace_s + COMMAND_TIMEOUT_S
    )
    if not result.ok:
        await runner.run(commands.kill(record.engine, record.container_id), timeout=COMMAND_TIMEOUT_S)
    state = await inspect(runner, record.engine, record.container_id)
    killed = not result.ok or (state is not None and state.exit_code == EXIT_KILLED)
    return ("killed" if killed else "stopped"), state


async def remove(runner, record: ContainerRecord) -> bool:
    result = await runner.run(commands.remove(record.engine, record.container_id), timeout=COMMAND_TIMEOUT_S)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        if record.logs_pid and await runner.is_alive(record.logs_pid):
            await runner.signal(record.logs_pid, 15)
    return result.ok


async def remove_named(runner, engine: str, name: str) -> None:
    """A container left under this name (stopped, or not ours to adopt) is in the way of `run --name`."""
    await runner.run(commands.remove(engine, name), timeout=COMMAND_TIMEOUT_S)


def exit_summary(state: ContainerState | None) -> str:
    if state is None:
        return "the container is gone"
    if state.oom_killed:
        return f"the container was killed by the kernel's OOM killer (exit code {state.exit_code})"
    if state.exit_code is not None and state.status in ("exited", "stopped", "dead"):
        text = f"the container exited with code {state.exit_code}"
        return f"{text}: {state.error}" if state.error else text
    return f"the container is {state.status or 'in an unknown state'}"


def oom_finding(state: ContainerState | None) -> list[dict]:
    """The toolkit's finding for a container the OOM killer ended (host memory, not NPU memory)."""
    if state is None or not state.oom_killed:
        return []
    return [
        {
            "code": "container_oom_killed",
            "title": _("The engine container was killed for lack of host memory (OOM)"),
            "hint": _(
                "The kernel's OOM killer ended the container: host RAM (or the container's memory limit) ran "
                "out, typically while loading weights. Free memory on the node, lower --max-model-len or "
                "the number of engines on it, or raise the container's memory limit."
            ),
            "line": f"OOMKilled: true, exit code {state.exit_code}",
            "line_no": 0,
        }
    ]


def read_lines(
    path: str, offset: int, max_bytes: int = runtime.MAX_LOG_BYTES_PER_READ
) -> tuple[list[str], int]:
    """New lines of the deployment log from offset, each without the follower's time stamp."""
    lines, offset = runtime.read_log(path, offset, max_bytes)
    return [split_stamp(line)[1] for line in lines], offset


def tail_lines(path: str, count: int = 40) -> list[str]:
    return [split_stamp(line)[1] for line in runtime.tail_lines(path, count)]
