"""The shape of a known failure signature (workers.ascend.signatures holds the rows)."""

import re
from dataclasses import dataclass

# A finding quotes its line; vLLM prints whole argument namespaces on one line, so keep the quote readable.
MAX_QUOTED_CHARS = 1000


def quote(line: str) -> str:
    """A log line as a finding quotes it: stripped, and cut after MAX_QUOTED_CHARS."""
    quoted = line.strip()
    if len(quoted) > MAX_QUOTED_CHARS:
        quoted = quoted[:MAX_QUOTED_CHARS] + "…"
    return quoted


def token(code: str) -> str:
    """A regex that matches `code` only as a whole token, not inside a longer number or word."""
    return rf"(?<![0-9A-Za-z]){re.escape(code)}(?![0-9A-Za-z])"


@dataclass(frozen=True)
class Signature:
    code: str
    title: str
    hint: str
    patterns: tuple[str, ...]
    # Generic markers that every NPU failure ends with (ERR00100 "PTA call acl api failed" follows an OOM,
    # a failed graph capture, ...). They name this signature only when nothing more specific matched.
    weak_patterns: tuple[str, ...] = ()
    # Where `hint` holds only for an engine on CPUs (vLLM's CPU backends), the hint for one on NPUs. The
    # panel picks it for deployments that hold NPUs (panel.deployments.launch.findings).
    npu_hint: str = ""
    # The general code of a specific failure (hccl_socket_timeout is a kind of hccl): the finding carries
    # both, and a finding of the general code alone is left out once a specific one of it was found.
    general: str = ""
    # Lines that must follow the matched one, each after the one before, for it to count: a warning that
    # is harmless on its own and the cause of a later failure ("Failed to import vllm_ascend_C", then a
    # start that dies while capturing graphs).
    then: tuple[str, ...] = ()
    # A line that, seen before `then` completed, shows the harmless case after all (graphs captured fine).
    unless: str = ""
    # Codes of broader findings that are this failure seen from another layer (the capture call that failed
    # because no stream was left, the operator that failed because HCCL's buffer was too small): once this
    # one is found, their findings are left out wherever they stand in the log.
    explains: tuple[str, ...] = ()
    # Name the first rank that failed: a timeout on every rank is the symptom of one rank that died first.
    names_first_rank: bool = False
    # Figures the matched line states (regexes with named groups, tried in order) and the hint that names
    # them: "NEEDED ... = 294MB, HCCL_BUFFSIZE=200MB" gives the size to set, not just the variable. The
    # hint is a str.format template whose fields are the groups; a line without the figures gets `hint`.
    figures: tuple[str, ...] = ()
    figured_hint: str = ""
