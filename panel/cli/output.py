"""What the CLI prints: tables for people, JSON and YAML for scripts, errors with the API's field errors."""

import json
import sys
from datetime import UTC, datetime

import yaml

from panel.cli import jsonpath

FORMATS = ("table", "json", "yaml", "name")


def table(rows: list[list], headers: list[str]) -> str:
    """Columns padded to their widest cell, two spaces apart, as kubectl prints them."""
    cells = [[str(c) for c in headers]] + [["" if c is None else str(c) for c in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)) for row in cells]
    return "\n".join(line.rstrip() for line in lines)


def to_json(data) -> str:
    return json.dumps(data, indent=2, ensure_ascii=False, default=str)


def to_yaml(data) -> str:
    return yaml.safe_dump(data, default_flow_style=False, sort_keys=False, allow_unicode=True).rstrip("\n")


def render(data, fmt: str, rows=None, headers=None, names=None) -> str:
    """`data` as `fmt`: json / yaml of the data itself, `jsonpath=…` through that template (jsonpath.py),
    a table of rows(data), or one name per line."""
    if fmt.startswith(jsonpath.PREFIX):
        return jsonpath.render(fmt, data)
    if fmt == "json":
        return to_json(data)
    if fmt == "yaml":
        return to_yaml(data)
    if fmt == "name":
        return "\n".join(names)
    return table(rows, headers)


def age(timestamp: str | None, now: datetime | None = None) -> str:
    """ "2026-01-01T10:00:00Z" → "5m": how long ago, in its largest unit (kubectl's AGE)."""
    if not timestamp:
        return ""
    try:
        then = datetime.fromisoformat(timestamp)
    except ValueError:
        return timestamp
    if then.tzinfo is None:
        then = then.replace(tzinfo=UTC)
    seconds = max(0, int(((now or datetime.now(UTC)) - then).total_seconds()))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def field_errors(errors, prefix: str = "") -> list[tuple[str, str]]:
    """(path, message) for each error: flat paths (`nodes[0].npus`) as the strict API sends them, and
    nested ones (`{"nodes": [{"npus": [...]}]}`) as older panels do, flattened the same way."""
    if isinstance(errors, str):
        return [(prefix, errors)]
    if isinstance(errors, list):
        if all(isinstance(item, str) for item in errors):
            return [(prefix, item) for item in errors]
        found = []
        for index, item in enumerate(errors):
            if item:
                found += field_errors(item, f"{prefix}[{index}]")
        return found
    if isinstance(errors, dict):
        found = []
        for key, value in errors.items():
            key = str(key)
            if key.isdigit():
                path = f"{prefix}[{key}]"
            elif key == "non_field_errors":
                path = prefix
            else:
                path = f"{prefix}.{key}" if prefix else key
            found += field_errors(value, path)
        return found
    return [(prefix, str(errors))]


def error_lines(detail: str, body: dict | None = None) -> list[str]:
    """`error: <detail>`, then each field error as `  path: message`; for a failed wait, the findings
    and the end of the deployment's log."""
    body = body or {}
    lines = [f"error: {detail}"]
    for path, message in field_errors(body.get("errors") or {}):
        line = f"{path}: {message}" if path else message
        if line != detail:
            lines.append(f"  {line}")
    lines += failure_lines(body)
    return lines


def failure_lines(body: dict) -> list[str]:
    """Findings and log tail of a failed start: in a failed wait's answer, or in the deployment itself."""
    findings = body.get("findings")
    log_tail = body.get("log_tail")
    if isinstance(findings, dict):  # the deployment's own `findings` field: {findings, log_tail}
        log_tail = log_tail or findings.get("log_tail")
        findings = findings.get("findings")
    deployment = body.get("deployment")
    if not findings and not log_tail and isinstance(deployment, dict):
        return failure_lines({"findings": deployment.get("findings")})
    lines = []
    for finding in findings or []:
        lines.append(f"  finding: {message_of(finding)}")
        if isinstance(finding, dict) and finding.get("hint"):
            lines.append(f"    hint: {finding['hint']}")
    if log_tail:
        lines.append("  log tail:")
        lines += [f"    {line}" for line in log_tail]
    return lines


def message_of(item) -> str:
    """A planner warning or finding as a sentence: its `message`, or the item itself when it is text."""
    if isinstance(item, dict):
        return str(item.get("message") or item.get("code") or item)
    return str(item)


def warn(message: str) -> None:
    print(f"warning: {message}", file=sys.stderr)


def note(message: str) -> None:
    """Progress for people (stderr), so stdout stays what a script parses."""
    print(message, file=sys.stderr, flush=True)
