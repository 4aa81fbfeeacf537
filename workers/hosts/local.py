"""LocalRunner: commands on the machine the agent runs on, as subprocesses in their own process groups."""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import time
from pathlib import Path

import psutil

from workers.hosts.base import (
    CommandError,
    CommandResult,
    LineCallback,
    Runner,
    check_argv,
    check_env,
    check_log_path,
    check_pid,
    spawn_failure_result,
)
from workers.hosts.streaming import LineCollector, supervise, supervised_result

# Detached children this process started, kept process-wide (runners are made per task, the engines they
# start live on) so whichever runner checks on one reaps it when it exits: no zombies left behind.
_detached_children: dict[int, subprocess.Popen] = {}


def _reap_finished_children() -> None:
    for pid, child in list(_detached_children.items()):
        if child.poll() is not None:
            del _detached_children[pid]


class LocalRunner(Runner):
    """Runs argv lists with subprocess; env given to run() is merged over os.environ and base_env."""

    def __init__(self, base_env: dict[str, str] | None = None):
        self.base_env = check_env(base_env)

    def _environment(self, env: dict[str, str]) -> dict[str, str]:
        return {**os.environ, **self.base_env, **env}

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
        started = time.monotonic()
        try:
            process = await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                env=self._environment(env),
                cwd=cwd,
                # Its own session and process group, so a timeout can kill everything it started.
                start_new_session=True,
            )
        except OSError as error:
            result = spawn_failure_result(argv, error, started)
            if on_line is not None:
                on_line("stderr", result.stderr.rstrip("\n"))
            return result

        stdout = LineCollector("stdout", on_line)
        stderr = LineCollector("stderr", on_line)
        # Piped above, so present (stdin only when there is input to feed).
        assert process.stdout is not None
        assert process.stderr is not None
        out_pipe, err_pipe, in_pipe = process.stdout, process.stderr, process.stdin

        async def feed_stdin() -> None:
            if stdin is None or in_pipe is None:
                return
            try:
                in_pipe.write(stdin)
                await in_pipe.drain()
                in_pipe.close()
            except (BrokenPipeError, ConnectionResetError):
                pass  # the program exited without reading all of its input; its exit status tells why

        async def finished() -> None:
            await asyncio.gather(
                feed_stdin(),
                stdout.pump(out_pipe.read),
                stderr.pump(err_pipe.read),
                process.wait(),
            )

        async def stop(sig: int) -> None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, sig)

        stopped = await supervise(
            finished(), timeout=timeout, cancel=cancel, stop=stop, kill_grace_s=self.kill_grace_s
        )
        exit_status: int | None
        try:
            exit_status = await asyncio.wait_for(process.wait(), timeout=1.0)
        except TimeoutError:
            exit_status = process.returncode
        return supervised_result(argv, exit_status, stdout, stderr, started, stopped)

    async def read_text(self, path: str) -> str | None:
        try:
            return await asyncio.to_thread(Path(path).read_text, encoding="utf-8", errors="replace")
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            return None

    async def start_detached(
        self, argv: list[str], *, env: dict[str, str] | None = None, cwd: str | None = None, log_path: str
    ) -> int:
        argv = check_argv(argv)
        environment = self._environment(check_env(env))
        check_log_path(log_path)
        started = time.monotonic()
        try:
            with open(log_path, "ab") as log:
                process = subprocess.Popen(
                    argv,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env=environment,
                    cwd=cwd,
                    start_new_session=True,
                )
        except OSError as error:
            raise CommandError(spawn_failure_result(argv, error, started)) from error
        _reap_finished_children()
        _detached_children[process.pid] = process
        return process.pid

    async def is_alive(self, pid: int) -> bool:
        check_pid(pid)
        child = _detached_children.get(pid)
        if child is not None:
            if child.poll() is None:
                return True
            del _detached_children[pid]
            return False
        try:
            return psutil.Process(pid).status() not in (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD)
        except psutil.NoSuchProcess:
            return False

    async def signal(self, pid: int, sig: int) -> None:
        check_pid(pid)
        try:
            os.killpg(pid, sig)
        except ProcessLookupError:
            # pid leads no process group (or is gone): signal the process itself if it still exists.
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        _reap_finished_children()

    async def close(self) -> None:
        # Nothing to release: detached processes must outlive the runner, and run() cleans up after itself.
        return None
