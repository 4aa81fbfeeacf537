"""Pack the nodes' uploaded archives into one bundle, with their clocks lined up.

Each node's log lines carry that node's local time (vLLM, CANN and torch print local time without a zone).
The node's manifest says its UTC offset and its clock at collection (collected_at); the panel noted when the
upload arrived (received_at, the panel's clock). A line's local time minus the UTC offset is the node's
UTC; plus (received_at - collected_at) it is the panel's time. The skew includes the upload's own duration,
seconds at most, which is what "aligned" can mean without a time protocol. timeline.txt lists every node's
failure lines in that one time; the first failing rank is the earliest across nodes.
"""

from __future__ import annotations

import io
import json
import tarfile
from datetime import UTC, datetime, timedelta
from pathlib import PurePosixPath

from workers.ascend.ranks import line_time
from workers.ascend.signature_types import quote

MAX_MEMBER_BYTES = 64 * 1024 * 1024
TIMELINE_LINES = 3000
FAILURE_WORDS = ("ERROR", "Error", "error code", "Traceback", "EI0", "EE9", "EH9", "EZ9", "died", "timeout")


def read_node_archive(data: bytes, node: str) -> tuple[dict, list[tuple[str, bytes]]]:
    """(manifest, [(name under node/, bytes)]) of one node's upload; names that would leave node/ are
    dropped."""
    manifest: dict = {}
    members: list[tuple[str, bytes]] = []
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        for entry in tar:
            path = PurePosixPath(entry.name)
            if (
                not entry.isfile()
                or entry.size > MAX_MEMBER_BYTES
                or path.is_absolute()
                or ".." in path.parts
            ):
                continue
            parts = path.parts[1:] if path.parts and path.parts[0] == node else path.parts
            if not parts:
                continue
            member = tar.extractfile(entry)
            if member is None:  # not a regular file's data (checked above; tarfile's types allow it)
                continue
            content = member.read()
            name = "/".join(parts)
            if name == "manifest.json":
                try:
                    manifest = json.loads(content)
                except ValueError:
                    manifest = {}
            members.append((name, content))
    return manifest, members


def skew_of(received_at: str | None, manifest: dict) -> timedelta:
    if received_at is None:
        return timedelta(0)
    try:
        sent = datetime.fromisoformat(manifest["collected_at"])
        return datetime.fromisoformat(received_at) - sent
    except (KeyError, TypeError, ValueError):
        return timedelta(0)


def panel_time(line: str, manifest: dict, skew: timedelta) -> datetime | None:
    """The panel-clock UTC time of a node's log line, or None when the line has no time."""
    parts = line_time(line)
    if parts is None:
        return None
    month, day, hour, minute, second, fraction = parts
    try:
        year = datetime.fromisoformat(manifest["collected_at"]).year
    except (KeyError, TypeError, ValueError):
        year = datetime.now(UTC).year
    try:
        local = datetime(year, month, day, hour, minute, second, int(fraction * 1_000_000), tzinfo=UTC)
    except ValueError:
        return None
    return local - timedelta(seconds=int(manifest.get("utc_offset_s") or 0)) + skew


def summarize(nodes: dict[str, dict]) -> tuple[dict, str]:
    """(summary, timeline text) from {node: {"manifest", "received_at", "engine_log": text}}."""
    clocks, findings, timeline, firsts = {}, {}, [], []
    for node, seen in sorted(nodes.items()):
        manifest = seen.get("manifest") or {}
        skew = skew_of(seen.get("received_at"), manifest)
        clocks[node] = {
            "collected_at": manifest.get("collected_at"),
            "received_at": seen.get("received_at"),
            "utc_offset_s": manifest.get("utc_offset_s"),
            "skew_s": round(skew.total_seconds(), 3),
        }
        findings[node] = manifest.get("findings") or []
        for line in (seen.get("engine_log") or "").splitlines():
            if any(word in line for word in FAILURE_WORDS) and (when := panel_time(line, manifest, skew)):
                timeline.append((when, node, quote(line)))
        first = manifest.get("first_rank")
        if first:
            when = panel_time(first.get("line") or "", manifest, skew)
            firsts.append((when or datetime.max.replace(tzinfo=UTC), node, first, when))
    first_failure = None
    if firsts:
        _, node, first, when = min(firsts, key=lambda entry: entry[0])
        first_failure = {**first, "node": node, "time": when.isoformat() if when else None}
    timeline.sort(key=lambda entry: entry[0])
    text = "".join(f"{when.isoformat()}  {node}  {line}\n" for when, node, line in timeline[-TIMELINE_LINES:])
    summary = {"first_failure": first_failure, "clocks": clocks, "findings": findings}
    return summary, "# every node's failure lines, in the panel's clock (UTC)\n" + text


def pack(root: str, summary: dict, timeline: str, nodes: dict[str, list[tuple[str, bytes]]]) -> bytes:
    buffer = io.BytesIO()
    now = datetime.now(UTC).timestamp()
    entries = [("MANIFEST.json", json.dumps(summary, indent=2).encode()), ("timeline.txt", timeline.encode())]
    entries += [(f"{node}/{name}", data) for node, members in sorted(nodes.items()) for name, data in members]
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name, data in entries:
            entry = tarfile.TarInfo(f"{root}/{name}")
            entry.size, entry.mtime, entry.mode = len(data), now, 0o644
            tar.addfile(entry, io.BytesIO(data))
    return buffer.getvalue()
