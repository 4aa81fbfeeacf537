"""bench/attacks.py counts attacks, not tests (issue 32): only tests marked `attack(kind)` that ran are
attacks; positive checks and tests with the panel's own broker user are counted apart, a skipped attack is
not counted, and the flags come from what the marked tests asserted."""

import json

from bench.attacks import figures, outcomes


def marks(attack=None, flags=(), bystander=False, other_callers=False) -> dict:
    return {"attack": attack, "flags": list(flags), "bystander": bystander, "other_callers": other_callers}


def report(tmp_path, *entries) -> dict:
    path = tmp_path / "attacks.jsonl"
    lines = [
        json.dumps({"id": test, "when": when, "passed": passed, "skipped": skipped, "marks": mark})
        for test, when, passed, skipped, mark in entries
    ]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return outcomes(path)


def test_checks_and_skipped_attacks_are_not_counted_as_attacks(tmp_path):
    tests = report(
        tmp_path,
        ("a1", "call", True, False, marks("flood", bystander=True)),
        ("a2", "call", True, False, marks("poison-lines", bystander=True)),
        ("check", "call", True, False, marks(bystander=True)),  # a positive check: no attack mark
        ("skipped", "setup", False, True, marks("broker-limits")),  # this broker cannot refuse it
    )

    found = figures(tests)

    assert (found["attacks"], found["refused"]) == (2, 2)
    assert found["by_class"] == {"flood": 1, "poison-lines": 1}
    assert found["other_nodes_stayed_online"]
    assert found["panel_pages_ok"]
    assert not found["panel_compromised"]
    assert not found["other_node_reached"]


def test_an_attack_that_got_through_is_counted_unrefused_and_raises_its_flags(tmp_path):
    tests = report(
        tmp_path,
        ("a1", "call", False, False, marks("ingest-control", flags=["attacks_panel"], bystander=True)),
        ("a2", "call", False, False, marks("impersonation", flags=["reaches_other_node"])),
        ("a3", "call", True, False, marks("hostile-engine", other_callers=True)),
        ("a3", "teardown", False, False, marks("hostile-engine", other_callers=True)),
    )

    found = figures(tests)

    assert (found["attacks"], found["refused"]) == (3, 0)  # a failed teardown fails its test too
    assert found["panel_compromised"]
    assert found["other_node_reached"]
    assert not found["other_nodes_stayed_online"]
    assert not found["usage_recorded_for_others"]


def test_no_bystander_or_caller_at_all_is_not_reported_as_staying_online(tmp_path):
    found = figures(report(tmp_path, ("a1", "call", True, False, marks("replay"))))

    assert not found["other_nodes_stayed_online"]
    assert not found["usage_recorded_for_others"]
