"""One event loop per process, in a helper thread, for synchronous callers (Celery task bodies).

A fresh asyncio.run() per call would throw away pooled SSH connections each time; this loop lives as long
as the process, so they are reused. After a fork (Celery's prefork pool) the child starts its own.
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")

_lock = threading.Lock()
_loop: asyncio.AbstractEventLoop | None = None


def sync_loop() -> asyncio.AbstractEventLoop:
    """The process-wide helper loop, started on first use."""
    global _loop
    with _lock:
        if _loop is None or _loop.is_closed():
            loop = asyncio.new_event_loop()
            thread = threading.Thread(target=loop.run_forever, name="runner-sync-loop", daemon=True)
            thread.start()
            _loop = loop
        return _loop


def run_coroutine_sync(coro: Coroutine[Any, Any, T]) -> T:
    """Run coro on the helper loop and block until it is done; Ctrl-C or a kill cancels it there."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        pass
    else:
        coro.close()
        raise RuntimeError(
            "run_sync() was called from inside a running event loop, where blocking would freeze it; "
            "use `await runner.run(...)` there instead"
        )
    future = asyncio.run_coroutine_threadsafe(coro, sync_loop())
    try:
        return future.result()
    except BaseException:
        # Cancelling the task kills the command's process group (see streaming.supervise).
        future.cancel()
        raise


def _forget_loop_after_fork() -> None:
    # The helper thread does not exist in a forked child; its loop object must not be reused.
    global _lock, _loop
    _lock = threading.Lock()
    _loop = None


os.register_at_fork(after_in_child=_forget_loop_after_fork)
