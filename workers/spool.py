"""The agent's outbox to the panel: what could not be sent waits on disk and goes out in order.

A message is sent at once while nothing waits; when the broker does not take it (Redis restarting, the
network down) it is appended to a spool file in the agent's state directory, and so is everything after it
until a sender thread has delivered the spool in order. Killing the agent loses nothing written there; the
next start sends it. Bounded: past MAX_SPOOL_BYTES new messages are dropped and counted, never the old ones
(they hold the start of what the panel is missing). The agent's events spool their message unsealed and
are sealed when they leave (workers.events.publish_unsealed), so a stamp never goes stale on disk.
"""

import json
import logging
import os
import threading
from pathlib import Path

from workers.leases import state_dir

log = logging.getLogger(__name__)

MAX_SPOOL_BYTES = int(os.environ.get("ASCEND_PANEL_SPOOL_MAX_BYTES", str(256 * 1024 * 1024)))
RETRY_S = 1.0


class Spool:
    def __init__(self, directory: Path, send, max_bytes: int = MAX_SPOOL_BYTES):
        self.path = directory / "spool.jsonl"
        self.offset_path = directory / "spool.offset"
        self._send = send
        self.max_bytes = max_bytes
        self.dropped = 0
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._sender: threading.Thread | None = None
        if self._waiting():
            self._start_sender()

    def _waiting(self) -> bool:
        return self.path.exists() and self.path.stat().st_size > self._offset()

    def _offset(self) -> int:
        try:
            return int(self.offset_path.read_text() or 0)
        except (FileNotFoundError, ValueError):
            return 0

    def send(self, task_name: str, message: dict) -> None:
        with self._lock:
            if not self._waiting():
                try:
                    self._send(task_name, message)
                    return
                except Exception as error:  # the broker did not take it: keep it, in order
                    log.warning("panel unreachable (%s); spooling to %s", error, self.path)
            self._append(task_name, message)
            self._start_sender()
        self._wake.set()

    def _append(self, task_name: str, message: dict) -> None:
        line = json.dumps({"task": task_name, "message": message}) + "\n"
        size = self.path.stat().st_size if self.path.exists() else 0
        if size + len(line) > self.max_bytes:
            self.dropped += 1
            log.error(
                "spool %s is full (%d bytes): message dropped (%d so far)", self.path, size, self.dropped
            )
            return
        with self.path.open("a") as handle:
            handle.write(line)

    def _start_sender(self) -> None:
        if self._sender is None or not self._sender.is_alive():
            self._sender = threading.Thread(target=self._drain_forever, name="spool-sender", daemon=True)
            self._sender.start()

    def _drain_forever(self) -> None:
        while True:
            try:
                if self.drain():
                    return
            except Exception:
                log.exception("spooled messages not sent yet; retrying")
            self._wake.wait(RETRY_S)
            self._wake.clear()

    def drain(self) -> bool:
        """Send what waits, in order; True once the spool is empty (then it is truncated)."""
        with self._lock:
            offset = self._offset()
            if not self.path.exists():
                return True
            with self.path.open("rb") as handle:
                handle.seek(offset)
                for raw in handle:
                    entry = json.loads(raw)
                    self._send(entry["task"], entry["message"])  # raises while the broker is away
                    offset += len(raw)
                    self.offset_path.write_text(str(offset))
            self.path.unlink()
            self.offset_path.unlink(missing_ok=True)
            log.info("spooled messages delivered")
            return True


_spools: dict[str, Spool] = {}
_spools_lock = threading.Lock()


def spool_for(send) -> Spool:
    """The process's spool (one per state directory)."""
    directory = state_dir()
    with _spools_lock:
        spool = _spools.get(str(directory))
        if spool is None:
            spool = _spools[str(directory)] = Spool(directory, send)
        return spool
