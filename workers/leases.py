"""Operation leases on the host: an agent runs one operation once at a time, however often it is delivered.

Every delivery of an operation's task is an attempt. Before running one, the agent takes the operation's
lease: an exclusive flock on a file in its state directory, held while the attempt runs and released by
the kernel if the agent dies (kill -9 included). Beside it a small record counts the attempts and keeps
that the operation finished, so a delivery that arrives while another attempt runs, or after the operation
ended, runs nothing. The agent's heartbeat lists what it holds and what it finished lately; the panel's
reaper re-sends an operation its agent no longer knows (the attempt died with the agent).
"""

import contextlib
import fcntl
import json
import os
import threading
import time
import uuid
from pathlib import Path

from workers.contracts import utcnow

DONE_REPORTED_S = 3600  # how long heartbeats keep listing a finished operation
RECORDS_KEPT_S = 7 * 24 * 3600

_held: set[str] = set()
_held_lock = threading.Lock()


class LeaseUnavailable(Exception):
    """This delivery must not run: another attempt holds the lease, or the operation already finished."""


def state_dir(environ=os.environ) -> Path:
    """Where the agent keeps its own state (leases, the event spool): ASCEND_PANEL_STATE_DIR, else
    var/lib/ascend-panel under the host root (a sim host keeps its state in its own tree)."""
    configured = environ.get("ASCEND_PANEL_STATE_DIR", "")
    root = Path(configured or Path(environ.get("ASCEND_PANEL_HOST_ROOT", "/")) / "var/lib/ascend-panel")
    root.mkdir(parents=True, exist_ok=True, mode=0o700)
    return root


def _operations_dir() -> Path:
    path = state_dir() / "operations"
    path.mkdir(exist_ok=True, mode=0o700)
    return path


def _write_json(path: Path, data: dict) -> None:
    temporary = path.with_suffix(".tmp")
    temporary.write_text(json.dumps(data))
    os.replace(temporary, path)


class OperationLease:
    def __init__(self, operation_id: str):
        self.operation_id = str(uuid.UUID(operation_id))  # refuse anything that is not an operation id
        directory = _operations_dir()
        self.record_path = directory / f"{self.operation_id}.json"
        self.lock_path = directory / f"{self.operation_id}.lock"
        self.attempt = 0
        self._fd: int | None = None

    def _record(self) -> dict:
        try:
            return json.loads(self.record_path.read_text())
        except (FileNotFoundError, ValueError):
            return {}

    def acquire(self) -> int:
        """Take the lease and start a new attempt (its number), or raise LeaseUnavailable."""
        fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise LeaseUnavailable(f"operation {self.operation_id} is running in another attempt") from None
        record = self._record()
        if record.get("finished"):
            os.close(fd)
            raise LeaseUnavailable(f"operation {self.operation_id} already ended {record['finished']}")
        self._fd = fd
        self.attempt = int(record.get("attempts", 0)) + 1
        _write_json(self.record_path, {"attempts": self.attempt, "started": utcnow().isoformat()})
        with _held_lock:
            _held.add(self.operation_id)
        return self.attempt

    def finish(self, state: str) -> None:
        record = {**self._record(), "finished": state, "finished_at": time.time()}
        _write_json(self.record_path, record)

    def release(self) -> None:
        with _held_lock:
            _held.discard(self.operation_id)
        if self._fd is not None:
            os.close(self._fd)  # closing the descriptor drops the flock
            self._fd = None


@contextlib.contextmanager
def leased(operation_id: str):
    lease = OperationLease(operation_id)
    lease.acquire()
    try:
        yield lease
    finally:
        lease.release()


def running_operations() -> list[str]:
    with _held_lock:
        return sorted(_held)


def finished_operations(now: float | None = None) -> list[str]:
    """Operations this host finished within DONE_REPORTED_S; prunes records older than RECORDS_KEPT_S."""
    now = now or time.time()
    done = []
    for path in _operations_dir().glob("*.json"):
        try:
            record = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        finished_at = record.get("finished_at")
        if finished_at is None:
            continue
        if now - finished_at > RECORDS_KEPT_S:
            for stale in (path, path.with_suffix(".lock")):
                with contextlib.suppress(OSError):
                    stale.unlink()
        elif now - finished_at <= DONE_REPORTED_S:
            done.append(path.stem)
    return sorted(done)
