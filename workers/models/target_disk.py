"""Free disk on a copy's target node, asked over SSH before rsync sends a byte.

The source node's agent runs df on the target through the ssh rsync is about to use (the same pinned
known_hosts file, BatchMode and key; see commands.remote_df_argv), for the destination and each folder above
it: the destination is usually not there yet (rsync --mkpath makes it), and df answers only for paths that
exist. A copy that cannot fit fails here, saying how much it needs and how much is free where; before, a
full disk was only explained after rsync had filled it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from workers.hosts import LocalRunner
from workers.i18n import gettext_noop as _
from workers.models.commands import destination_and_parents, explain_rsync_failure, remote_df_argv
from workers.models.download import DISK_MARGIN_BYTES

# Enough for ssh's ConnectTimeout and a df that waits on a slow network mount.
DF_TIMEOUT_S = 120
SSH_FAILED = 255  # ssh's own exit status: it did not get as far as running the command
GIB = 1024**3
# A df -P row: file system, 1024-blocks, used, available, capacity, mount point (the first and last may
# hold spaces).
DF_ROW = re.compile(r"^(?P<fs>.+?)\s+\d+\s+\d+\s+(?P<available>\d+)\s+(?:\d+%|-)\s+(?P<mount>/.*)$")


class TargetDiskError(Exception):
    """The copy must not start; .hint says what to do."""

    def __init__(self, message: str, hint: str = ""):
        super().__init__(message)
        self.hint = hint


class FreeSpaceUnknown(Exception):
    """The target logged us in but df gave no answer (the message has its last word); the copy may go on."""


@dataclass(frozen=True)
class FreeSpace:
    path: str  # the destination's nearest existing folder on the target
    free_bytes: int
    mount_point: str
    # Already in the destination, from an earlier copy that was cut off: rsync keeps and reuses it.
    present_bytes: int = 0


def parse_df(output: str, asked: list[str]) -> FreeSpace | None:
    """The first row of `df -Pk -- asked...` output, for the path it belongs to; None without rows.

    df prints a row for each path that exists and only an error for the others; as asked runs from the
    destination up to /, and a folder's parents exist whenever it does, the rows belong to the last
    len(rows) paths asked, and the first of them is the nearest existing one."""
    rows = [match for line in output.splitlines() if (match := DF_ROW.match(line.rstrip()))]
    if not rows or len(rows) > len(asked):
        return None
    first = rows[0]
    return FreeSpace(
        path=asked[len(asked) - len(rows)],
        free_bytes=int(first["available"]) * 1024,
        mount_point=first["mount"],
    )


def parse_du_total(output: str, path: str) -> int:
    """Bytes `du -sk -- path` counted, from its "<KiB>\t<path>" line; 0 when it printed none (no such
    folder yet)."""
    for line in output.splitlines():
        size, tab, where = line.partition("\t")
        if tab and where == path and size.isdigit():
            return int(size) * 1024
    return 0


def still_needed(needed_bytes: int, space: FreeSpace) -> int:
    """What the copy has yet to write: a retry skips what an earlier attempt left in place. An estimate — a
    file of the same name but other content is sent again — that rsync's own "No space left" backs up."""
    return max(0, needed_bytes - space.present_bytes)


def check_fits(needed_bytes: int, space: FreeSpace, node: str) -> None:
    """TargetDiskError unless what the copy still has to write, and the margin downloads keep free too, fit
    in space."""
    missing = still_needed(needed_bytes, space)
    if missing + DISK_MARGIN_BYTES <= space.free_bytes:
        return
    there = f", {space.present_bytes / GIB:.2f} GiB of it already there" if space.present_bytes else ""
    raise TargetDiskError(
        f"not enough disk space on {node} at {space.path}: "
        f"the copy needs {needed_bytes / GIB:.2f} GiB{there} (+{DISK_MARGIN_BYTES / GIB:.0f} GiB margin), "
        f"{space.free_bytes / GIB:.2f} GiB are free on {space.mount_point}; nothing was copied",
        _(
            "Free disk space on the target node where the copy goes (its models root), or copy to a node "
            "with more room; then retry."
        ),
    )


def free_space_at(
    target_path: str,
    *,
    user: str,
    host: str,
    port: int,
    known_hosts_file: str = "",
    identity_file: str = "",
) -> FreeSpace:
    """Free disk at target_path's nearest existing folder on host, by df over ssh.

    TargetDiskError when ssh itself fails (the same reasons rsync would give, said before any byte moves);
    FreeSpaceUnknown when the target ran something but df gave no row."""
    argv = remote_df_argv(
        user, host, target_path, port, known_hosts_file=known_hosts_file, identity_file=identity_file
    )
    result = LocalRunner().run_sync(argv, timeout=DF_TIMEOUT_S)
    asked = destination_and_parents(target_path)
    space = parse_df(result.stdout, asked)
    if space is not None:
        return replace(space, present_bytes=parse_du_total(result.stdout, asked[0]))
    said = [line for line in result.stderr.splitlines() if line.strip()]
    if result.exit_status == SSH_FAILED:
        reason, hint = explain_rsync_failure(said)
        login = f"{user}@{host}" if user else host
        raise TargetDiskError(f"ssh to {login}:{port} failed: {reason}; nothing was copied", hint)
    if result.timed_out:
        raise FreeSpaceUnknown(f"df did not answer within {DF_TIMEOUT_S} s")
    raise FreeSpaceUnknown(said[-1] if said else f"df exited with {result.exit_status} and printed no row")


def ensure_room(emitter, needed_bytes: int, target_path: str, node: str, **ssh) -> None:
    """Fail with TargetDiskError before a copy of needed_bytes to node:target_path that cannot fit there.

    ssh holds free_space_at's login keywords. When df gives no answer the copy goes on, with a log line
    saying so: rsync still reports "No space left on device" if it comes to that."""
    emitter.progress(0, f"Checking free disk on {node}")
    try:
        space = free_space_at(target_path, **ssh)
    except FreeSpaceUnknown as error:
        emitter.log(f"cannot read the free disk on {node} ({error}); copying without that check")
        return
    check_fits(needed_bytes, space, node)
    there = f" ({space.present_bytes / GIB:.2f} GiB already there)" if space.present_bytes else ""
    emitter.log(
        f"{node}: {space.free_bytes / GIB:.2f} GiB free at {space.path} ({space.mount_point}), "
        f"the copy needs {needed_bytes / GIB:.2f} GiB{there}"
    )
