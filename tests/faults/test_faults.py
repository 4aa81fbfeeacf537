"""Real processes SIGKILLed mid-work and restarted as systemd would; afterwards every operation is terminal,
every deployment is in its desired state (a surviving engine adopted with its pid), no event is lost, nothing
ran twice, and a deleted deployment's NPUs are free. The scenarios are in tests/faults/scenarios.py (also run
by bench/faults.py); what each checks is in tests/faults/checks.py."""

import json

import pytest

from tests.faults.scenarios import SCENARIOS, run_scenario

pytestmark = [pytest.mark.faults, pytest.mark.timeout(420)]

# Scenarios that fail on today's code, each with what fails and why (strict=False: they may pass by luck).
KNOWN_FAILURES: dict[str, str] = {}


def params():
    for scenario in SCENARIOS:
        marks = []
        if scenario.name in KNOWN_FAILURES:
            marks.append(pytest.mark.xfail(reason=KNOWN_FAILURES[scenario.name], strict=False))
        yield pytest.param(scenario, id=scenario.name, marks=marks)


@pytest.mark.parametrize("scenario", list(params()))
def test_the_panel_survives(fault_stack, scenario):
    outcome = run_scenario(fault_stack, scenario)
    report = json.dumps(outcome.as_dict(), indent=1)
    assert outcome.survived, report
    assert (outcome.lost_events, outcome.stuck_operations, outcome.double_runs) == (0, 0, 0), report
    assert outcome.hit_mid, f"the kill landed after the work had ended, so it proved nothing:\n{report}"
