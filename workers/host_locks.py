"""Host-wide locks by kind of work: two installs never run at once on one host, nor two model copies, nor
two conversions, whichever operations they belong to (the operation lease, workers.leases, only keeps one
operation's deliveries apart).

An exclusive flock on <state dir>/locks/<node>.<kind>.lock, which the kernel drops if the agent dies,
holding the id of the operation that took it (the node's name is in it for test and demo processes that play
several nodes on one state directory; a real host has one). The second one fails at once, naming the first,
rather than waiting: a waiting task would hold one of the agent's few worker threads (and an answer to the
ask-before-run may need one, workers.asking), and the panel would show it running for hours while it does
nothing. The admin (or the reconcile loop) runs it again once the first ended.
"""

import fcntl
import os
from contextlib import contextmanager

from workers.i18n import gettext_noop as _
from workers.leases import state_dir

INSTALL = "install"
COPY = "copy"
CONVERSION = "conversion"


class HostBusy(Exception):
    """Another operation of the same kind runs on this host; a foreseen failure (it carries a hint)."""

    def __init__(self, message: str, hint: str):
        super().__init__(message)
        self.hint = hint


@contextmanager
def host_lock(kind: str, operation_id: str, node: str):
    """Hold the host's lock of `kind` for the operation, or raise HostBusy naming the one that holds it."""
    directory = state_dir() / "locks"
    directory.mkdir(exist_ok=True, mode=0o700)
    fd = os.open(directory / f"{node}.{kind}.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 64, 0).decode(errors="replace").strip() or "?"
            raise HostBusy(
                _("another {kind} runs on this host (operation {holder}); this one did not start").format(
                    kind=kind, holder=holder
                ),
                _("Wait for that operation to end, then run this one again."),
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, operation_id.encode(), 0)
        yield
    finally:
        os.close(fd)  # drops the flock


def exclusive(kind: str, operation_id: str, body):
    """An operation body (emitter, config) that runs holding the host's lock of `kind`."""

    def locked(emitter, config):
        with host_lock(kind, operation_id, config.node_name):
            return body(emitter, config)

    return locked
