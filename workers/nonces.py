"""The nonces of tasks this agent accepted, so that a task runs at most once however often its message is
replayed, and across agent restarts (workers.identity stamps every message with one).

One empty file per nonce in the agent's state directory, named by the time until which its task counts and
the nonce: creating it with O_EXCL is the atomic "first sight" between the agent's threads (and a restarted
agent). Files past their time are pruned now and then: by then the stamp itself refuses the message.
"""

import contextlib
import os
import threading
import time
from pathlib import Path

from workers.identity import CLOCK_SKEW_S, Stamp
from workers.leases import state_dir

PRUNE_EVERY_S = 60.0


class SeenNonces:
    def __init__(self, directory: Path):
        self.directory = directory
        self.directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        self._pruned_at = float("-inf")
        self._lock = threading.Lock()

    def first_sight(self, signer: str, stamp: Stamp) -> bool:
        """True the first time this stamp's nonce is seen here; False for a replay."""
        # The signer is part of the name: two signers (a node and the central agent) never share a nonce.
        path = self.directory / f"{int(stamp.expires + CLOCK_SKEW_S)}.{signer}.{stamp.nonce}"
        try:
            os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
        except FileExistsError:
            return False
        self._prune_now_and_then()
        return True

    def _prune_now_and_then(self) -> None:
        now = time.time()
        with self._lock:
            if now - self._pruned_at < PRUNE_EVERY_S:
                return
            self._pruned_at = now
        with os.scandir(self.directory) as entries:
            for entry in entries:
                until, _, _ = entry.name.partition(".")
                if until.isdigit() and int(until) < now:
                    with contextlib.suppress(OSError):
                        os.unlink(entry.path)


_stores: dict[str, SeenNonces] = {}
_stores_lock = threading.Lock()


def seen_tasks() -> SeenNonces:
    """This agent's store of task nonces (one per state directory)."""
    directory = state_dir() / "nonces"
    with _stores_lock:
        store = _stores.get(str(directory))
        if store is None:
            store = _stores[str(directory)] = SeenNonces(directory)
        return store


def first_sight(signer: str, stamp: Stamp) -> bool:
    return seen_tasks().first_sight(signer, stamp)
