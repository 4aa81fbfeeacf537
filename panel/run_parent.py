"""`make run` and a signal sent to make's own process id.

GNU make does not pass SIGINT, SIGHUP or SIGQUIT on to the command it runs (only SIGTERM): it expects the
terminal to have sent them to the whole process group. A `kill -INT <make's pid>` therefore reaches make
alone, which resets the signal to its default, keeps it blocked and waits for its child to end — forever,
as the panel never hears of it. So panel.run watches its parent: when that is make and make is in that
state (the signal blocked and no longer caught, in /proc/<pid>/status), the panel stops as on Ctrl-C, and
make, its child gone, ends with the signal it got.
"""

import os
import signal
import threading
import time

FATAL_SIGNALS = (signal.SIGINT, signal.SIGHUP, signal.SIGQUIT)
MAKE_NAMES = frozenset({"make", "gmake"})
POLL_S = 0.5


def _status_masks(pid: int) -> dict[str, int]:
    masks = {}
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            key, _sep, value = line.partition(":")
            if key in ("SigBlk", "SigCgt"):
                masks[key] = int(value.strip(), 16)
    return masks


def make_got_fatal_signal(pid: int) -> bool:
    """True while make (process `pid`) handles SIGINT, SIGHUP or SIGQUIT and waits for its children."""
    masks = _status_masks(pid)
    for sig in FATAL_SIGNALS:
        bit = 1 << (sig - 1)
        if masks.get("SigBlk", 0) & bit and not masks.get("SigCgt", 0) & bit:
            return True
    return False


def is_make(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/comm") as comm:
            return comm.read().strip() in MAKE_NAMES
    except OSError:
        return False


def stop_with_make(poll_s: float = POLL_S) -> threading.Thread | None:
    """When the parent is make, a thread that sends this process SIGINT once make got a fatal signal (seen
    twice in a row: make blocks those signals for an instant while it starts a job). None otherwise."""
    parent = os.getppid()
    if not is_make(parent):
        return None

    def watch():
        seen = 0
        while os.getppid() == parent:
            try:
                seen = seen + 1 if make_got_fatal_signal(parent) else 0
            except OSError:
                return
            if seen >= 2:
                os.kill(os.getpid(), signal.SIGINT)
                return
            time.sleep(poll_s)

    thread = threading.Thread(target=watch, name="stop-with-make", daemon=True)
    thread.start()
    return thread
