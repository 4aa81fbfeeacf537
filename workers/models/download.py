"""Download a hub repository onto this node: resumable, verified, atomic.

Files go to DST.partial/<path>.part, continue with an HTTP Range request after an interruption, are
checked against the hub's size (and sha256 where the hub gives one), then renamed to <path>. When every
file is there, DST.partial becomes DST in one rename, so DST is either complete or absent. Free disk is
checked before the first byte.
"""

from __future__ import annotations

import hashlib
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

import httpx

from workers.i18n import gettext_noop as _
from workers.models.hub import TIMEOUT, HubFile, auth_headers

CHUNK_BYTES = 1024 * 1024
# Room left free beside the model, so a full disk never takes the node's logs down with it.
DISK_MARGIN_BYTES = 1024**3
ATTEMPTS_PER_FILE = 4
PROGRESS_EVERY_S = 0.5
PARTIAL_SUFFIX = ".partial"

ProgressCallback = Callable[["Progress"], None]


class DownloadError(Exception):
    """A download that cannot finish; .hint says what to do."""

    def __init__(self, message: str, hint: str = ""):
        super().__init__(message)
        self.hint = hint


@dataclass
class Progress:
    total_bytes: int
    done_bytes: int = 0
    file: str = ""
    started: float = field(default_factory=time.monotonic)
    resumed_bytes: int = 0  # already on disk when this run started; not counted in the rate

    @property
    def rate_bps(self) -> float:
        elapsed = time.monotonic() - self.started
        return (self.done_bytes - self.resumed_bytes) / elapsed if elapsed > 0 else 0.0

    @property
    def eta_s(self) -> float | None:
        rate = self.rate_bps
        return (self.total_bytes - self.done_bytes) / rate if rate > 0 else None

    @property
    def percent(self) -> float:
        return 100.0 * self.done_bytes / self.total_bytes if self.total_bytes else 100.0

    def as_payload(self) -> dict:
        eta = self.eta_s
        return {
            "bytes_done": self.done_bytes,
            "bytes_total": self.total_bytes,
            "rate_bps": round(self.rate_bps),
            "eta_s": round(eta) if eta is not None else None,
            "file": self.file,
        }


def safe_relative(path: str) -> PurePosixPath:
    """A hub file path as a relative path that cannot climb out of the download folder."""
    relative = PurePosixPath(path)
    if relative.is_absolute() or ".." in relative.parts or not relative.parts:
        raise DownloadError(f"the hub listed an unsafe file name {path!r}; refusing to write it")
    return relative


def check_free_space(destination: Path, needed: int) -> int:
    """Free bytes on the file system that will hold destination; DownloadError if needed does not fit."""
    probe = destination
    while not probe.exists():
        probe = probe.parent
    free = shutil.disk_usage(probe).free
    if needed + DISK_MARGIN_BYTES > free:
        raise DownloadError(
            f"not enough disk space at {probe}: the download needs {needed / 1024**3:.1f} GiB "
            f"(+{DISK_MARGIN_BYTES / 1024**3:.0f} GiB margin), {free / 1024**3:.1f} GiB are free",
            hint=_("Free disk space on the node, or choose a models root on a larger disk."),
        )
    return free


def download_files(
    files: list[HubFile],
    destination: str | Path,
    *,
    source: str,
    on_progress: ProgressCallback | None = None,
    client: httpx.Client | None = None,
    should_stop: Callable[[], bool] = lambda: False,
) -> dict:
    """Download `files` into folder `destination`; return a report (files, bytes, seconds, verified)."""
    final = Path(destination)
    staging = final.with_name(final.name + PARTIAL_SUFFIX)
    relatives = [(safe_relative(f.path), f) for f in files]
    total = sum(f.size for f in files)
    if final.exists():
        if _complete(final, relatives):
            return {"files": len(files), "bytes": total, "already_present": True, "sha256_verified": 0}
        raise DownloadError(
            f"{final} exists but does not hold this repository's files; delete it or pick another folder",
            hint=_("Delete the artifact (or the folder) first, or download under another name."),
        )
    have = sum(_bytes_on_disk(staging, relative) for relative, _file in relatives)
    check_free_space(staging, total - have)
    staging.mkdir(parents=True, exist_ok=True)
    progress = Progress(total_bytes=total, done_bytes=have, resumed_bytes=have)
    owned = client is None
    client = client or httpx.Client(timeout=TIMEOUT, follow_redirects=True)
    verified = 0
    try:
        reporter = _Reporter(progress, on_progress)
        for relative, hub_file in relatives:
            progress.file = hub_file.path
            verified += _fetch_one(client, hub_file, staging / relative, source, reporter, should_stop)
        reporter.report(force=True)
    finally:
        if owned:
            client.close()
    staging.rename(final)
    return {
        "files": len(files),
        "bytes": total,
        "resumed_bytes": have,
        "already_present": False,
        "sha256_verified": verified,
        "seconds": round(time.monotonic() - progress.started, 2),
    }


def _complete(folder: Path, relatives) -> bool:
    return all(
        (folder / relative).is_file() and (folder / relative).stat().st_size == hub_file.size
        for relative, hub_file in relatives
    )


def _bytes_on_disk(staging: Path, relative: PurePosixPath) -> int:
    done, part = staging / relative, _part_path(staging / relative)
    if done.is_file():
        return done.stat().st_size
    return part.stat().st_size if part.is_file() else 0


def _part_path(target: Path) -> Path:
    return target.with_name(target.name + ".part")


class _Reporter:
    """Calls on_progress at most every PROGRESS_EVERY_S seconds (and once at the end)."""

    def __init__(self, progress: Progress, callback: ProgressCallback | None):
        self.progress, self.callback, self.last = progress, callback, 0.0

    def advance(self, nbytes: int) -> None:
        self.progress.done_bytes += nbytes
        self.report()

    def report(self, force: bool = False) -> None:
        now = time.monotonic()
        if self.callback and (force or now - self.last >= PROGRESS_EVERY_S):
            self.last = now
            self.callback(self.progress)


def _fetch_one(client, hub_file: HubFile, target: Path, source: str, reporter: _Reporter, should_stop) -> int:
    """Bring one file to `target`; returns 1 when its sha256 was checked, 0 when the hub gave none."""
    if target.is_file() and target.stat().st_size == hub_file.size:
        if hub_file.sha256:
            _verify_sha256(target, hub_file, _hash_file(target).hexdigest())
            return 1
        return 0
    target.parent.mkdir(parents=True, exist_ok=True)
    part = _part_path(target)
    last_error: Exception | None = None
    for _attempt in range(ATTEMPTS_PER_FILE):
        try:
            digest = _transfer(client, hub_file, part, source, reporter, should_stop)
            break
        except (httpx.TransportError, httpx.RemoteProtocolError) as error:
            last_error = error  # transient: the next attempt resumes from what is on disk
            time.sleep(0.5)
    else:
        raise DownloadError(
            f"{hub_file.path}: the transfer failed {ATTEMPTS_PER_FILE} times ({last_error})",
            hint=_("The connection to the hub keeps dropping; start the download again — it resumes."),
        )
    size = part.stat().st_size
    if size != hub_file.size:
        part.unlink()
        raise DownloadError(
            f"{hub_file.path}: got {size} bytes, the hub lists {hub_file.size}; the partial file was removed",
            hint=_("Start the download again; if it repeats, the mirror serves a different file."),
        )
    if hub_file.sha256:
        _verify_sha256(part, hub_file, digest.hexdigest())
    part.rename(target)
    return 1 if hub_file.sha256 else 0


def _transfer(client, hub_file: HubFile, part: Path, source: str, reporter: _Reporter, should_stop):
    """Append the missing bytes of hub_file to `part` (Range when some are there); return the sha256."""
    have = part.stat().st_size if part.is_file() else 0
    digest = _hash_file(part, hashlib.sha256()) if have else hashlib.sha256()
    if hub_file.size and have >= hub_file.size:
        return digest
    headers = auth_headers(source)
    if have:
        headers["Range"] = f"bytes={have}-"
    with client.stream("GET", hub_file.url, headers=headers) as response:
        if response.status_code == 200 and have:
            # The server ignored Range: start the file over rather than append a second copy.
            reporter.advance(-have)
            have, digest = 0, hashlib.sha256()
        elif response.status_code not in (200, 206):
            raise DownloadError(
                f"{hub_file.url} answered {response.status_code}",
                hint=_("Check the repository id, revision and access token (HF_TOKEN on the node)."),
            )
        with part.open("ab" if have else "wb") as handle:
            for chunk in response.iter_bytes():  # as received, so a drop keeps every byte
                handle.write(chunk)
                digest.update(chunk)
                reporter.advance(len(chunk))
                if should_stop():
                    raise DownloadError(f"stopped during {hub_file.path}; the partial file is kept")
    return digest


def _hash_file(path: Path, digest=None):
    digest = digest or hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(CHUNK_BYTES):
            digest.update(chunk)
    return digest


def _verify_sha256(path: Path, hub_file: HubFile, actual_hex: str) -> None:
    if actual_hex != hub_file.sha256:
        path.unlink()
        raise DownloadError(
            f"{hub_file.path}: sha256 {actual_hex} differs from the hub's {hub_file.sha256}; "
            "the file was removed",
            hint=_("Start the download again; if it repeats, the mirror serves a corrupted copy."),
        )
