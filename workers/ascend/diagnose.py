"""Name the known Ascend failures in a log: what failed and the hint to fix it.

`python -m workers.ascend.diagnose FILE` (or `-` for stdin) prints a JSON list of findings
{"code", "title", "hint", "line", "line_no"}: one per signature, at the first line that matches it, in the
order the failures first appear. A healthy log gives []. The signatures are in workers.ascend.signatures.
"""

import argparse
import json
import re
import sys
from collections.abc import Iterable
from dataclasses import dataclass

from workers.ascend.signatures import SIGNATURES, Signature

# A finding quotes its line; vLLM prints whole argument namespaces on one line, so keep the quote readable.
MAX_QUOTED_CHARS = 1000


@dataclass(frozen=True)
class _CompiledSignature:
    signature: Signature
    strong: re.Pattern | None
    weak: re.Pattern | None


def _either(patterns: tuple[str, ...]) -> re.Pattern | None:
    # Each pattern carries its own inline flags, so wrap it as a scoped group before joining.
    return re.compile("|".join(_scoped(pattern) for pattern in patterns)) if patterns else None


def _scoped(pattern: str) -> str:
    flags = re.match(r"\(\?([aiLmsux]+)\)", pattern)
    if flags:
        return f"(?{flags.group(1)}:{pattern[flags.end() :]})"
    return f"(?:{pattern})"


COMPILED = tuple(
    _CompiledSignature(signature, _either(signature.patterns), _either(signature.weak_patterns))
    for signature in SIGNATURES
)


def _finding(signature: Signature, line: str, line_no: int) -> dict:
    quoted = line.strip()
    if len(quoted) > MAX_QUOTED_CHARS:
        quoted = quoted[:MAX_QUOTED_CHARS] + "…"
    return {
        "code": signature.code,
        "title": signature.title,
        "hint": signature.hint,
        "line": quoted,
        "line_no": line_no,
    }


def diagnose_lines(lines: Iterable[str]) -> list[dict]:
    """Findings for the known failures in these log lines (line numbers start at 1)."""
    strong: dict[str, dict] = {}
    weak: dict[str, dict] = {}
    for line_no, line in enumerate(lines, start=1):
        for compiled in COMPILED:
            code = compiled.signature.code
            if code in strong:
                continue
            if compiled.strong and compiled.strong.search(line):
                strong[code] = _finding(compiled.signature, line, line_no)
            elif compiled.weak and code not in weak and compiled.weak.search(line):
                weak[code] = _finding(compiled.signature, line, line_no)
    findings = strong if strong else weak
    return sorted(findings.values(), key=lambda finding: finding["line_no"])


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
