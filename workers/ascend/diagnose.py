"""Name the known Ascend failures in a log: what failed and the hint to fix it.

`python -m workers.ascend.diagnose FILE` (or `-` for stdin) prints a JSON list of findings
{"code", "general", "title", "hint", "line", "line_no"}: one per signature, at the first line that matches
it, in the order the failures first appear. `code` is the most specific code known; `general` is the family
it belongs to (the same code for a general signature): hccl_socket_timeout is a kind of hccl. A finding
of a general code is left out when a specific one of its family came first (it would repeat it), and a
finding a more specific one explains (Signature.explains) is left out wherever it stands. Findings
of a timeout on every rank also carry "first_rank": {"rank", "where", "line", "line_no"} or null; findings
whose line states the figures of the fix (a too-small HCCL buffer: the size needed and the size set) carry
"figures" and a hint that names them.
A healthy log gives []. The signatures are in workers.ascend.signatures.
"""

import argparse
import json
import math
import re
import sys
from collections.abc import Iterable
from dataclasses import dataclass

from workers.ascend.ranks import first_failing_rank
from workers.ascend.signature_types import MAX_QUOTED_CHARS, quote
from workers.ascend.signatures import SIGNATURES, Signature

__all__ = ["MAX_QUOTED_CHARS", "diagnose", "diagnose_lines", "main"]


@dataclass(frozen=True)
class _CompiledSignature:
    signature: Signature
    strong: re.Pattern | None
    weak: re.Pattern | None
    then: tuple[re.Pattern, ...]
    unless: re.Pattern | None


def _either(patterns: tuple[str, ...]) -> re.Pattern | None:
    # Each pattern carries its own inline flags, so wrap it as a scoped group before joining.
    return re.compile("|".join(_scoped(pattern) for pattern in patterns)) if patterns else None


def _scoped(pattern: str) -> str:
    flags = re.match(r"\(\?([aiLmsux]+)\)", pattern)
    if flags:
        return f"(?{flags.group(1)}:{pattern[flags.end() :]})"
    return f"(?:{pattern})"


COMPILED = tuple(
    _CompiledSignature(
        signature,
        _either(signature.patterns),
        _either(signature.weak_patterns),
        tuple(re.compile(_scoped(pattern)) for pattern in signature.then),
        re.compile(signature.unless) if signature.unless else None,
    )
    for signature in SIGNATURES
)
_EXPLAINS = {signature.code: signature.explains for signature in SIGNATURES if signature.explains}


def _finding(signature: Signature, line: str, line_no: int) -> dict:
    finding = {
        "code": signature.code,
        "general": signature.general or signature.code,
        "title": signature.title,
        "hint": signature.hint,
        "line": quote(line),
        "line_no": line_no,
    }
    figures = _figures(signature, line)
    if figures:
        finding["hint"] = signature.figured_hint.format(**figures)
        finding["figures"] = figures
    return finding


def _figures(signature: Signature, line: str) -> dict[str, int] | None:
    """The figures the line states, each rounded up to a whole number (a size to set is never a fraction
    short); None when the line states none of them, so the finding keeps the signature's general hint."""
    for pattern in signature.figures:
        found = re.search(pattern, line)
        if found:
            return {name: math.ceil(float(value)) for name, value in found.groupdict().items() if value}
    return None


class _Waiting:
    """A match that counts only once its `then` lines followed, in order."""

    def __init__(self, compiled: _CompiledSignature, finding: dict):
        self.compiled, self.finding, self.stage = compiled, finding, 0

    def voided_by(self, line: str) -> bool:
        return self.compiled.unless is not None and self.compiled.unless.search(line) is not None

    def advance(self, line: str) -> bool:
        """Take one later line; True once every `then` pattern has matched."""
        then = self.compiled.then
        while self.stage < len(then) and then[self.stage].search(line):
            self.stage += 1  # one line may show more than one step ("capturing graphs ... failed")
        return self.stage == len(then)


def diagnose_lines(lines: Iterable[str]) -> list[dict]:
    """Findings for the known failures in these log lines (line numbers start at 1)."""
    lines = [line.rstrip("\n") for line in lines]
    strong: dict[str, dict] = {}
    weak: dict[str, dict] = {}
    waiting: dict[str, _Waiting] = {}
    for line_no, line in enumerate(lines, start=1):
        _advance(waiting, strong, line)
        for compiled in COMPILED:
            code = compiled.signature.code
            if code in strong:
                continue
            if compiled.strong and compiled.strong.search(line):
                finding = _finding(compiled.signature, line, line_no)
                if not compiled.then:
                    strong[code] = finding
                elif code not in waiting:
                    waiting[code] = _Waiting(compiled, finding)
            elif compiled.weak and code not in weak and compiled.weak.search(line):
                weak[code] = _finding(compiled.signature, line, line_no)
    findings = _without_repeats(list(strong.values()) if strong else list(weak.values()))
    for finding in findings:
        if any(s.names_first_rank for s in SIGNATURES if s.code == finding["code"]):
            finding["first_rank"] = first_failing_rank(lines)
    return sorted(findings, key=lambda finding: finding["line_no"])


def _advance(waiting: dict[str, _Waiting], strong: dict[str, dict], line: str) -> None:
    """Give each match still waiting for its `then` lines the next line: it is void, goes on waiting, or
    counts now."""
    for code, candidate in list(waiting.items()):
        if candidate.voided_by(line):
            del waiting[code]
        elif code not in strong and candidate.advance(line):
            strong[code] = candidate.finding
            del waiting[code]


def _without_repeats(findings: list[dict]) -> list[dict]:
    """The findings less those another one stands for.

    A specific finding stands for its family from its line on: a general one after it repeats the same
    failure with a vaguer hint. One before it is an earlier cause (a port in use, then the timeouts). A
    finding that explains broader ones (Signature.explains) stands for them wherever they are."""
    first_specific: dict[str, int] = {}
    for f in findings:
        if f["general"] != f["code"]:
            first_specific[f["general"]] = min(f["line_no"], first_specific.get(f["general"], f["line_no"]))
    findings = [f for f in findings if f["line_no"] < first_specific.get(f["code"], f["line_no"] + 1)]
    explained = {code for f in findings for code in _EXPLAINS.get(f["code"], ())}
    return [f for f in findings if f["code"] not in explained]


def diagnose(text: str) -> list[dict]:
    """Findings for the known failures in a whole log."""
    return diagnose_lines(text.splitlines())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m workers.ascend.diagnose",
        description="List the known Ascend failures found in a log, with a hint for each.",
    )
    parser.add_argument("file", metavar="FILE", help="log file, or - to read standard input")
    args = parser.parse_args(argv)
    try:
        if args.file == "-":
            findings = diagnose_lines(sys.stdin)
        else:
            with open(args.file, encoding="utf-8", errors="replace") as handle:
                findings = diagnose_lines(handle)
    except OSError as error:
        print(f"error: cannot read {args.file}: {error.strerror}", file=sys.stderr)
        return 2
    print(json.dumps(findings, ensure_ascii=False, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
