"""Keep an engine container's output in its deployment log: `<engine> logs -f` appended to a file.

    python -m workers.containers.follow ENGINE CONTAINER LOG_PATH

Started detached by the agent, so the log keeps growing while no task runs and after the agent restarts;
it ends when the container stops. Each line is written as "<RFC 3339 time> <text>": docker and podman give
the time (--timestamps), for iSula it is the time the line arrived. Started again for the same file (an
adopted container whose follower had gone), it asks only for lines after the file's last time and drops
any it already has, so a line is never kept twice.
"""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import UTC, datetime

from workers.containers import commands

TAIL_BYTES = 64 * 1024


def time_key(stamp: str) -> tuple[str, str]:
    """Sortable form of an RFC 3339 time with 0 to 9 fraction digits and a Z (or +00:00) zone."""
    whole, _, rest = stamp.partition(".")
    fraction = "".join(c for c in rest if c.isdigit())
    return whole.replace("T", " ")[:19], fraction.ljust(9, "0")


def split_stamp(line: str) -> tuple[str, str]:
    """("<time>", "<text>") of a follower line, or ("", line) when it carries no time."""
    stamp, _, text = line.partition(" ")
    if len(stamp) >= 20 and stamp[4] == "-" and stamp[10] == "T":
        return stamp, text
    return "", line


def last_stamp(path: str) -> str:
    try:
        with open(path, "rb") as log:
            size = log.seek(0, os.SEEK_END)
            log.seek(max(0, size - TAIL_BYTES))
            lines = log.read().decode("utf-8", errors="replace").splitlines()
    except OSError:
        return ""
    for line in reversed(lines):
        stamp, _text = split_stamp(line)
        if stamp:
            return stamp
    return ""


def now_stamp() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def follow(engine: str, container: str, log_path: str) -> int:
    since = last_stamp(log_path)
    argv = commands.logs(engine, container, follow=True, since=since or None)
    with (
        subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
        ) as logs,
        open(log_path, "a", encoding="utf-8") as out,
    ):
        for raw in logs.stdout or ():  # piped above: always there
            line = raw.decode("utf-8", errors="replace").rstrip("\r\n")
            if engine == "isula":
                stamp, text = now_stamp(), line
            else:
                stamp, text = split_stamp(line)
                stamp = stamp or now_stamp()
                if since and time_key(stamp) <= time_key(since):
                    continue  # the --since boundary line, or one the earlier follower kept
            out.write(f"{stamp} {text}\n")
            out.flush()
    return logs.returncode or 0


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    return follow(*args)


if __name__ == "__main__":
    sys.exit(main())
