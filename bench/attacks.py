"""The security tier's attacks as figures (issue 22): runs tests/security in a pytest process of its own
(Celery on RabbitMQ is process-wide, as `make test-security` says) and reads its JUnit XML.

Each collected test is one attack; an attack counts as refused when its test passed. `panel_compromised` and
`other_node_reached` are not asserted here: they are true when any test marked `attacks_panel` or
`reaches_other_node` (pyproject's markers) did not pass, so a regression shows up in the last line.

Run: PYTHONPATH=$PWD .venv/bin/python bench/attacks.py   (the last line is one JSON object)"""

import json
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ElementTree
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MARKS = ("attacks_panel", "reaches_other_node")


def tests_marked(mark: str) -> set[str]:
    """The node ids pytest selects for one marker, collected only (nothing runs)."""
    collected = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "tests/security",
            "--collect-only",
            "-q",
            "-m",
            mark,
            "-p",
            "no:cacheprovider",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    return {line.strip() for line in collected.stdout.splitlines() if "::" in line}


def node_id(case: ElementTree.Element) -> str:
    """JUnit's classname (tests.security.test_x) and name back to pytest's node id."""
    module = case.get("classname", "").replace(".", "/") + ".py"
    return f"{module}::{case.get('name')}"


def run_tier(report: Path) -> dict[str, bool]:
    """Every attack's node id and whether it was refused (its test passed)."""
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "tests/security",
            "-q",
            "-p",
            "no:cacheprovider",
            f"--junitxml={report}",
        ],
        cwd=ROOT,
        check=False,
    )
    outcomes = {}
    for case in ElementTree.parse(report).iter("testcase"):  # noqa: S314  (pytest wrote it just now)
        failed = any(case.find(tag) is not None for tag in ("failure", "error", "skipped"))
        outcomes[node_id(case)] = not failed
    return outcomes


def main() -> None:
    marked = {mark: tests_marked(mark) for mark in MARKS}
    with tempfile.TemporaryDirectory() as scratch:
        outcomes = run_tier(Path(scratch) / "security.xml")
    for mark, ids in marked.items():
        refused = sum(outcomes.get(i, False) for i in ids)
        print(f"{mark}: {len(ids)} attacks, {refused} refused, {len(ids - outcomes.keys())} not run")
    figures = {
        "attacks": len(outcomes),
        "refused": sum(outcomes.values()),
        # an attack that did not run is not a refusal
        "panel_compromised": not all(outcomes.get(i, False) for i in marked["attacks_panel"]),
        "other_node_reached": not all(outcomes.get(i, False) for i in marked["reaches_other_node"]),
    }
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
