"""Cancel between steps: the panel sends the agent a signed cancel task on the node's own queue; the agent
records a flag in its state directory, and the running operation reads it before each step.

The same on both transports, and nothing but the agent's own queue and disk: an agent needs no Redis. The
agent's worker runs a thread pool, so the cancel task is handled while an install's step runs.
"""

import logging
import os
import time
from pathlib import Path

from workers.leases import state_dir

log = logging.getLogger(__name__)

CANCEL_TTL_S = 7 * 24 * 3600  # long enough for any install; flags older than this are swept away


def _flags_dir() -> Path:
    folder = state_dir() / "cancel"
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    return folder


def _flag(operation_id: str) -> Path:
    name = str(operation_id)
    if not name or "/" in name or name.startswith("."):
        raise ValueError(f"not an operation id: {name!r}")
    return _flags_dir() / name


def record_cancel(operation_id: str) -> None:
    """The panel asked to cancel this operation (called by the verified cancel task)."""
    _flag(operation_id).touch()
    _sweep_old_flags()


def cancel_requested(operation_id: str) -> bool:
    """Whether the panel asked to cancel. A state dir that cannot be read is no reason to stop an install:
    the answer is then no, and the check before the next step asks again."""
    try:
        return _flag(operation_id).exists()
    except (OSError, ValueError) as error:
        log.warning("cancel flag of %s not readable (%s); carrying on", operation_id, error)
        return False


def _sweep_old_flags() -> None:
    cutoff = time.time() - CANCEL_TTL_S
    for flag in _flags_dir().iterdir():
        try:
            if flag.stat().st_mtime < cutoff:
                os.unlink(flag)
        except OSError:
            continue
