"""Which rank failed first, from the error lines of a multi-rank log.

When one rank dies or hangs, every other rank times out on it later (HCCL's notify wait EI0002, an AI Core
timeout 507014): the last errors name the survivors, the first one the culprit. Lines say which rank they
come from in several ways (`[rank3]:` from torch, `RankID:3` from torch_npu, `(Worker_TP3 pid=…)` from
vLLM's workers, `rank[3]` from HCCL) and carry times in several formats (CANN's `2025-06-25-10:45:23.586`,
vLLM's `06-25 10:45:23`, glog's `[E0625 10:45:23.586]`), so both are read from each line and compared. HCCL's
own verdict, `Cluster Exception Location[IP/ID]:[ip/device]`, names the stuck device and wins when present.
"""

from __future__ import annotations

import re

from workers.ascend.signature_types import quote

# (pattern, the group holding a global rank number or None when the tag only names a worker)
_RANK_TAGS: tuple[tuple[re.Pattern, str | None], ...] = (
    (re.compile(r"\[rank(?P<rank>\d+)\]"), "rank"),
    (re.compile(r"\bRankID:(?P<rank>\d+)"), "rank"),
    (re.compile(r"\bVllmWorker rank=(?P<rank>\d+)"), "rank"),
    (re.compile(r"\brank\[(?P<rank>\d+)\]"), "rank"),
    # A DP group's TP index is not a global rank; a worker without DP has TP rank = rank.
    (re.compile(r"\bWorker_TP(?P<rank>\d+)\b"), "rank"),
    (re.compile(r"\bWorker(?:_DP\d+)?_TP\d+(?:_PP\d+)?(?:_EP\d+)?\b"), None),
)
_CLUSTER_VERDICT = re.compile(r"Cluster Exception Location\[IP/ID\]:\[(?P<where>[^\]]+)\]")
_FAILURE = re.compile(
    r"(?i)\b(?:error|err\d{5}|exception|traceback|timeout|timed out|times out|died|failed)\b|\[E\d{4} |"
    + r"\b(?:EI|EE|EH|EZ|EL)\d{4}\b"
)
_NOT_A_FAILURE = re.compile(r"\b(?:INFO|WARNING|DEBUG)\b|\[[IW]\d{4} ")
_TIMES = (
    # CANN / torch_npu: 2025-06-25-10:45:23.586.187
    re.compile(r"\b\d{4}-(?P<mo>\d{2})-(?P<d>\d{2})-(?P<h>\d{2}):(?P<m>\d{2}):(?P<s>\d{2})(?:\.(?P<f>\d+))?"),
    # ISO: 2025-06-25 10:45:23,586
    re.compile(
        r"\b\d{4}-(?P<mo>\d{2})-(?P<d>\d{2})[ T](?P<h>\d{2}):(?P<m>\d{2}):(?P<s>\d{2})(?:[.,](?P<f>\d+))?"
    ),
    # glog (torch): [E0625 10:45:23.586121
    re.compile(r"\[[EWIF](?P<mo>\d{2})(?P<d>\d{2}) (?P<h>\d{2}):(?P<m>\d{2}):(?P<s>\d{2})(?:\.(?P<f>\d+))?"),
    # vLLM: ERROR 06-25 10:45:23
    re.compile(r"\b(?P<mo>\d{2})-(?P<d>\d{2}) (?P<h>\d{2}):(?P<m>\d{2}):(?P<s>\d{2})(?:\.(?P<f>\d+))?"),
)


def line_time(line: str) -> tuple | None:
    """(month, day, hour, minute, second, fraction) of the first time on the line; logs of one start do not
    cross a year, so the year is left out and formats with and without it compare."""
    for pattern in _TIMES:
        if match := pattern.search(line):
            fraction = float("0." + match["f"]) if match["f"] else 0.0
            return (
                int(match["mo"]),
                int(match["d"]),
                int(match["h"]),
                int(match["m"]),
                int(match["s"]),
                fraction,
            )
    return None


def rank_tag(line: str) -> tuple[int | None, str] | None:
    """(rank or None, the tag as printed) of the first rank tag on the line."""
    for pattern, group in _RANK_TAGS:
        if match := pattern.search(line):
            return (int(match[group]) if group else None), match.group(0)
    return None


def first_failing_rank(lines: list[str]) -> dict | None:
    """{"rank", "where", "line", "line_no"} of the first rank that failed, or None when no failure line
    names a rank. `rank` is None when only a worker or a device is named (`where` says which)."""
    for line_no, line in enumerate(lines, start=1):
        if match := _CLUSTER_VERDICT.search(line):
            return {"rank": None, "where": match["where"], "line": quote(line), "line_no": line_no}
    candidates = []
    for line_no, line in enumerate(lines, start=1):
        if not _FAILURE.search(line) or _NOT_A_FAILURE.search(line):
            continue
        tag = rank_tag(line)
        if tag is None:
            continue
        candidates.append((line_time(line), line_no, tag, line))
    if not candidates:
        return None
    timed = [c for c in candidates if c[0] is not None]
    # Ranks write to one log in whatever order their buffers flush: the time says who was first.
    _, line_no, (rank, where), line = min(timed or candidates, key=lambda c: (c[0] or (), c[1]))
    return {"rank": rank, "where": where, "line": quote(line), "line_no": line_no}
