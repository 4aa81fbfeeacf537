"""Pieces both runners share: splitting output into lines as it arrives, and stopping a command in time."""

from __future__ import annotations

import asyncio
import re
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
# A bare \r ends a line too: progress meters (rsync --info=progress2, pip, curl) redraw one line with \r and
# print \n only when done, so splitting on \n alone would hold every update back until the very end.
LINE_END = re.compile(rb"\r\n|\n|\r")


class LineCollector:
    """Collects one output stream as text and hands each complete line to the callback."""

    def __init__(self, stream: str, on_line: LineCallback | None):
        self.stream = stream
        self.on_line = on_line
        self._parts: list[str] = []
        self._pending = b""
        self._shown: bytes | None = None  # the pending redraw, handed to the callback before its end came

    @property
    def text(self) -> str:
        return "".join(self._parts)

    def feed(self, data: bytes) -> None:
        buffer = self._pending + data
        start = 0
        for end in LINE_END.finditer(buffer):
            if end.group() == b"\r" and end.end() == len(buffer):
                break  # maybe the first half of a \r\n; the next read tells
            self._emit(buffer[start : end.start()], end.group())
            start = end.end()
        self._pending = buffer[start:]
        if len(self._pending) > MAX_LINE_BYTES:
            self._emit(self._pending, b"")
            self._pending = b""
        elif self._pending and start and buffer[start - 1 : start] == b"\r" and not buffer.endswith(b"\r"):
            # A redraw (rsync's progress starts each with \r and ends none): handed on now, not when the
            # next redraw ends it a second later, so the operation's progress is the meter's latest.
            self._shown = self._pending
            if self.on_line is not None:
                self.on_line(self.stream, self._pending.decode("utf-8", errors="replace"))

    def finish(self) -> None:
        if self._pending:
            self._emit(self._pending, b"")
            self._pending = b""

    def _emit(self, raw: bytes, ending: bytes) -> None:
        shown, self._shown = self._shown, None
        line = raw.decode("utf-8", errors="replace")
        self._parts.append(line + ending.decode())
        if self.on_line is not None and raw != shown:  # a redraw handed on already is not handed on twice
            self.on_line(self.stream, line.removesuffix("\r"))  # a \r held back when the stream ended

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
