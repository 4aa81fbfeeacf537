"""Pieces both runners share: splitting output into lines as it arrives, and stopping a command in time."""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import Awaitable, Callable

from workers.hosts.base import CommandResult, LineCallback

READ_CHUNK = 64 * 1024
# A "line" longer than this is handed on in pieces, so a program printing without newlines cannot make
# the agent hold unbounded memory before the callback sees anything.
MAX_LINE_BYTES = 1024 * 1024
# After SIGKILL, how long to wait for the output pipes to close before giving up on them (a process that
# left the group may still hold them).
DRAIN_AFTER_KILL_S = 2.0


class LineCollector:
    """Collects one output stream as text and hands each complete line to the callback."""

    def __init__(self, stream: str, on_line: LineCallback | None):
        self.stream = stream
        self.on_line = on_line
        self._parts: list[str] = []
        self._pending = b""

    @property
    def text(self) -> str:
        return "".join(self._parts)

    def feed(self, data: bytes) -> None:
        pieces = (self._pending + data).split(b"\n")
        self._pending = pieces.pop()
        for piece in pieces:
            self._emit(piece, newline=True)
        if len(self._pending) > MAX_LINE_BYTES:
            self._emit(self._pending, newline=False)
            self._pending = b""

    def finish(self) -> None:
        if self._pending:
            self._emit(self._pending, newline=False)
            self._pending = b""

    def _emit(self, raw: bytes, *, newline: bool) -> None:
        line = raw.decode("utf-8", errors="replace")
        self._parts.append(line + "\n" if newline else line)
        if self.on_line is not None:
            self.on_line(self.stream, line.removesuffix("\r"))

    async def pump(self, read: Callable[[int], Awaitable[bytes]]) -> None:
        """Read until end of stream; what arrived stays collected even if this is cancelled."""
        try:
            while data := await read(READ_CHUNK):
                self.feed(data)
        finally:
            self.finish()


async def supervise(
    finished: Awaitable[object],
    *,
    timeout: float | None,
    cancel: asyncio.Event | None,
    stop: Callable[[int], Awaitable[None]],
    kill_grace_s: float,
) -> str | None:
    """Wait for `finished`; on timeout or cancel, stop the process group and return "timeout" / "cancel".

    stop(sig) must deliver sig to the command's whole process group. If the caller's task is itself
    cancelled, the group is killed before the cancellation goes on, so no command outlives its caller.
    """
    done = asyncio.ensure_future(finished)
    cancel_wait = asyncio.ensure_future(cancel.wait()) if cancel is not None else None
    try:
        waiting = {done} if cancel_wait is None else {done, cancel_wait}
        await asyncio.wait(waiting, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        if done.done():
            done.result()
            return None
        reason = "cancel" if cancel_wait is not None and cancel_wait.done() else "timeout"
        await stop(signal.SIGTERM)
        if not await _finishes_within(done, kill_grace_s):
            await stop(signal.SIGKILL)
            await _finishes_within(done, DRAIN_AFTER_KILL_S)
        return reason
    except asyncio.CancelledError:
        await stop(signal.SIGKILL)
        raise
    finally:
        if cancel_wait is not None:
            cancel_wait.cancel()
        if not done.done():
            done.cancel()
            await asyncio.gather(done, return_exceptions=True)


def supervised_result(
    argv: list[str],
    exit_status: int | None,
    stdout: LineCollector,
    stderr: LineCollector,
    started: float,
    stopped: str | None,
) -> CommandResult:
    """The result of a command that supervise() watched; stopped is what supervise() returned."""
    return CommandResult(
        argv=argv,
        exit_status=exit_status,
        stdout=stdout.text,
        stderr=stderr.text,
        duration_s=time.monotonic() - started,
        timed_out=stopped == "timeout",
        cancelled=stopped == "cancel",
    )


async def _finishes_within(task: asyncio.Future, seconds: float) -> bool:
    await asyncio.wait({task}, timeout=seconds)
    return task.done()
