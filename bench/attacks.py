"""The security tier's attacks as figures (issues 22 and 32): runs tests/security in a pytest process of
its own (Celery on RabbitMQ is process-wide, as `make test-security` says) and reads the report its
conftest writes (ASCEND_ATTACK_REPORT: one JSON line per test phase, with its marks).

An attack is a test marked `attack(kind)`: made with a node's own broker user and key, or as its engine,
never with the panel's broker user. Tests without that mark (positive checks, attacks with the panel's
own user on its Redis or queue) are counted apart as checks. An attack counts as refused when its test
passed; one that did not run (skipped: this broker cannot refuse it) is reported apart, not counted.

The last line's flags are read from what the tests asserted, never set here:
- panel_compromised: a test marked `attacks_panel` failed;
- other_node_reached: a test marked `reaches_other_node` failed;
- other_nodes_stayed_online, panel_pages_ok: every test with the `bystander` fixture passed (a second node
  beating through its own user must never go 3 s without a recorded heartbeat, and /, /nodes/ and
  /api/v1/nodes/ must answer 200 after the attack);
- usage_recorded_for_others: every test with the `other_callers` fixture passed (another node's deployment
  answers its callers before and after the attack, and each of their requests is drained into a usage row).

Run: PYTHONPATH=$PWD .venv/bin/python bench/attacks.py   (needs TEST_RABBITMQ_ADMIN_URL/_ADDRESS as the
security tier does; the last line is one JSON object)"""

import json
import os
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
REPORT_ENV = "ASCEND_ATTACK_REPORT"  # tests/security/conftest.py writes it


def run_tier(report: Path, selection: list[str]) -> None:
    env = {**os.environ, REPORT_ENV: str(report)}
    command = [sys.executable, "-m", "pytest", *selection, "-q", "-p", "no:cacheprovider"]
    subprocess.run(command, cwd=ROOT, env=env, check=False)


def outcomes(report: Path) -> dict[str, dict]:
    """Per test: its marks, whether it ran (a call phase, or an error before it) and whether every phase
    passed."""
    tests: dict[str, dict] = {}
    for line in report.read_text(encoding="utf-8").splitlines():
        entry = json.loads(line)
        test = tests.setdefault(entry["id"], {"marks": entry["marks"], "ran": False, "passed": True})
        skipped = entry.get("skipped", False)
        if entry["when"] == "call" or not skipped:
            test["ran"] = True
        if not entry["passed"] and not skipped:
            test["passed"] = False
        if skipped and entry["when"] != "teardown":
            test["skipped"] = True
    for test in tests.values():
        if test.get("skipped"):
            test["ran"] = False
    return tests


def figures(tests: dict[str, dict]) -> dict:
    ran = {name: test for name, test in tests.items() if test["ran"]}
    attacks = {name: test for name, test in ran.items() if test["marks"]["attack"]}

    def all_passed(selected: list[dict]) -> bool:
        return bool(selected) and all(test["passed"] for test in selected)

    flagged = {
        flag: [test for test in ran.values() if flag in test["marks"]["flags"]]
        for flag in ("attacks_panel", "reaches_other_node")
    }
    bystanders = [test for test in ran.values() if test["marks"]["bystander"]]
    others_usage = [test for test in ran.values() if test["marks"].get("other_callers")]
    return {
        "attacks": len(attacks),
        "refused": sum(test["passed"] for test in attacks.values()),
        "by_class": dict(sorted(Counter(test["marks"]["attack"] for test in attacks.values()).items())),
        "panel_compromised": not all(test["passed"] for test in flagged["attacks_panel"]),
        "other_node_reached": not all(test["passed"] for test in flagged["reaches_other_node"]),
        "other_nodes_stayed_online": all_passed(bystanders),
        "usage_recorded_for_others": all_passed(others_usage),
        "panel_pages_ok": all_passed(bystanders),
    }


def main() -> None:
    selection = sys.argv[1:] or ["tests/security"]
    with tempfile.TemporaryDirectory() as scratch:
        report = Path(scratch) / "attacks.jsonl"
        report.touch()
        run_tier(report, selection)
        tests = outcomes(report)
    checks = [test for test in tests.values() if test["ran"] and not test["marks"]["attack"]]
    not_run = sorted(name for name, test in tests.items() if not test["ran"] and test["marks"]["attack"])
    failed = sorted(name for name, test in tests.items() if test["ran"] and not test["passed"])
    print(f"checks (not attacks): {len(checks)}, {sum(t['passed'] for t in checks)} passed")
    for name in not_run:
        print(f"attack not run here (not counted): {name}")
    for name in failed:
        print(f"FAILED: {name}")
    print(json.dumps(figures(tests)))


if __name__ == "__main__":
    main()
