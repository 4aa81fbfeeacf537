"""The Runner interface: run an argv on a host, stream its lines, stop it on timeout or cancel.

Every host command in the agent goes through a Runner, so install steps, probes and engine launches do not
care whether the host is this machine (LocalRunner) or a node reached over SSH (SshRunner).
"""

from __future__ import annotations

import asyncio
import re
import shlex
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from workers.hosts.sync_loop import run_coroutine_sync

LineCallback = Callable[[str, str], None]
"""Called as on_line(stream, line): stream is "stdout" or "stderr", line has no trailing newline."""

ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")

# How many trailing stderr lines a CommandError quotes: enough to show the error, short enough to read.
ERROR_TAIL_LINES = 10


@dataclass(frozen=True)
class CommandResult:
    """What a finished command did.

    exit_status is the process's exit code; a process ended by a signal reports minus the signal number
    (as subprocess does); None when the host never said (e.g. the SSH channel dropped).
    """

    argv: list[str]
    exit_status: int | None
    stdout: str
    stderr: str
    duration_s: float
    timed_out: bool = False
    cancelled: bool = False

    @property
    def ok(self) -> bool:
        return self.exit_status == 0 and not self.timed_out and not self.cancelled


class CommandError(Exception):
    """A command did not succeed; .result holds everything it printed."""

    def __init__(self, result: CommandResult):
        self.result = result
        super().__init__(self._message(result))

    def __reduce__(self):
        # args holds the message, not the result; rebuild from the result so the error survives pickling.
        return (type(self), (self.result,))

    @staticmethod
    def _message(result: CommandResult) -> str:
        command = shlex.join(result.argv)
        if result.timed_out:
            what = f"timed out after {result.duration_s:.1f}s and was stopped"
        elif result.cancelled:
            what = "was cancelled and stopped"
        elif result.exit_status is None:
            what = "ended without an exit status (the connection to the host may have dropped)"
        elif result.exit_status < 0:
            what = f"was killed by signal {-result.exit_status}"
        else:
            what = f"failed with exit status {result.exit_status}"
        tail_source, label = (result.stderr, "stderr") if result.stderr.strip() else (result.stdout, "stdout")
        tail = tail_source.rstrip("\n").splitlines()[-ERROR_TAIL_LINES:]
        message = f"command `{command}` {what}"
        if tail:
            message += f"; last {label} lines:\n" + "\n".join(tail)
        return message


def check_argv(argv: Sequence[str]) -> list[str]:
    """Return argv as a list, refusing the mistakes that would otherwise run something unexpected."""
    if isinstance(argv, str | bytes):
        raise TypeError(f"argv must be a list of strings, not a single string: {argv!r}")
    argv = list(argv)
    if not argv:
        raise ValueError("argv is empty: give at least the program to run")
    for arg in argv:
        if not isinstance(arg, str):
            raise TypeError(f"every argv item must be a string; got {arg!r} in {argv!r}")
        if "\0" in arg:
            raise ValueError(f"argv item contains a NUL byte, which no program can receive: {arg!r}")
    return argv


def check_env(env: Mapping[str, str] | None) -> dict[str, str]:
    """Return env as a dict after checking every name is a plain variable name and every value a str."""
    checked: dict[str, str] = {}
    for name, value in (env or {}).items():
        if not isinstance(name, str) or not ENV_NAME.match(name):
            raise ValueError(
                f"environment variable name {name!r} is not allowed: use letters, digits and underscores, "
                "not starting with a digit"
            )
        if not isinstance(value, str) or "\0" in value:
            raise ValueError(f"environment variable {name} must be a string without NUL bytes")
        checked[name] = value
    return checked


class Runner(ABC):
    """Runs commands on one host. Subclasses supply _execute and the process-management methods."""

    # Seconds between SIGTERM and SIGKILL when a command is stopped; long enough for a clean shutdown.
    kill_grace_s: float = 5.0

    async def run(
        self,
        argv: list[str],
        *,
        env: dict[str, str] | None = None,
        cwd: str | None = None,
        timeout: float | None = None,
        on_line: LineCallback | None = None,
        cancel: asyncio.Event | None = None,
        stdin: bytes | None = None,
        check: bool = False,
    ) -> CommandResult:
        """Run argv and wait for it; stream each output line to on_line as it arrives.

        On timeout or when cancel is set, the command's whole process group gets SIGTERM, then SIGKILL
        after kill_grace_s, and the result says timed_out / cancelled. A program that cannot be started
        reports exit status 127 (not found) or 126 (not executable), like a shell would.
        With check=True anything but success raises CommandError.
        """
        argv = check_argv(argv)
        env = check_env(env)
        if timeout is not None and timeout <= 0:
            raise ValueError(f"timeout must be a positive number of seconds, got {timeout}")
        result = await self._execute(
            argv, env=env, cwd=cwd, timeout=timeout, on_line=on_line, cancel=cancel, stdin=stdin
        )
        if check and not result.ok:
            raise CommandError(result)
        return result

    def run_sync(self, argv: list[str], **kwargs) -> CommandResult:
        """run() for synchronous code such as Celery task bodies.

        The command runs on a process-wide event loop in a helper thread, so SSH connections are pooled
        across calls; on_line is called from that thread. Calling this inside a running loop is an error.
        """
        return run_coroutine_sync(self.run(argv, **kwargs))

    @abstractmethod
    async def _execute(
        self,
        argv: list[str],
        *,
        env: dict[str, str],
        cwd: str | None,
        timeout: float | None,
        on_line: LineCallback | None,
        cancel: asyncio.Event | None,
        stdin: bytes | None,
    ) -> CommandResult:
        """Run an already-checked argv; never raises for a failing command."""

    @abstractmethod
    async def read_text(self, path: str) -> str | None:
        """The file's text (undecodable bytes replaced), or None when no regular file is at path."""

    @abstractmethod
    async def start_detached(
        self, argv: list[str], *, env: dict[str, str] | None = None, cwd: str | None = None, log_path: str
    ) -> int:
        """Start a long-lived process in its own session, stdout+stderr appended to log_path; its pid.

        The process survives the agent's exit; signal(pid, ...) reaches its whole process group.
        """

    @abstractmethod
    async def is_alive(self, pid: int) -> bool:
        """Whether pid is a running (not zombie) process on the host."""

    async def process_start(self, pid: int) -> int | None:
        """When pid started, in clock ticks after boot (/proc/<pid>/stat, field 22), or None when no such
        process runs. With the pid it names one process: a pid the kernel handed out again starts later."""
        stat = await self.read_text(f"/proc/{check_pid(pid)}/stat")
        fields = (stat or "").rpartition(")")[2].split()  # fields[0] is field 3, the state
        return int(fields[19]) if len(fields) > 19 and fields[19].isdigit() else None

    @abstractmethod
    async def signal(self, pid: int, sig: int) -> None:
        """Send sig to pid's process group (to pid alone if it leads none); no-op if it is gone."""

    @abstractmethod
    async def close(self) -> None:
        """Release what this runner holds (connections); running detached processes are untouched."""


def spawn_failure_result(argv: list[str], error: OSError, started: float) -> CommandResult:
    """The result for a program that could not be started, shaped like a shell's answer."""
    exit_status = 126 if isinstance(error, PermissionError) else 127
    return CommandResult(
        argv=argv,
        exit_status=exit_status,
        stdout="",
        stderr=f"cannot start {argv[0]}: {error}\n",
        duration_s=time.monotonic() - started,
    )


def check_pid(pid: int) -> int:
    # 0, negatives and 1 (init) would address our own group, every process, or the whole host.
    if isinstance(pid, bool) or not isinstance(pid, int) or pid <= 1:
        raise ValueError(f"pid must be a process id greater than 1, got {pid!r}")
    return pid


def check_log_path(log_path: str) -> None:
    if not log_path or not log_path.startswith("/"):
        raise ValueError(f"log_path must be an absolute path on the host, got {log_path!r}")
