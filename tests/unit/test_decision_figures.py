"""A decision's kinds and figures (panel/deployments/decisions.py): what the leader, the gateway and a person
may write, refused early in the caller with the reason."""

import pytest

from panel.core.domain.choices import COLOUR_ALARM, DecisionKind, DecisionOutcome, for_browser
from panel.deployments.decisions import BadDecision, checked_figures

AGREED_KINDS = {
    "scale_up", "scale_down", "scale_refused", "sleep", "wake", "wake_failed", "npu_suspect", "npu_failed",
    "npu_recovered", "replica_moved", "engine_fenced", "request_retried", "rollout", "revision", "restart",
    "gave_up",
}  # fmt: skip
PERSONS_KINDS = {"start", "stop"}  # a person's start and stop of serving


def test_the_agreed_kinds_each_with_a_colour_and_a_label_for_the_pages():
    assert set(DecisionKind.values) == AGREED_KINDS | PERSONS_KINDS
    assert set(DecisionKind.COLOURS) == AGREED_KINDS | PERSONS_KINDS
    assert DecisionKind.colour("npu_failed") == COLOUR_ALARM
    described = for_browser()
    assert set(described["decision"]["labels"]) == AGREED_KINDS | PERSONS_KINDS
    assert described["decision_outcome"]["labels"]["failed"] == "Failed"
    assert set(DecisionOutcome.values) == {"pending", "done", "failed"}


def test_figures_are_finite_numbers_by_name():
    figures = {"waiting_per_replica": 9.5, "target": 4, "for_s": 30, "from": 2, "to": 3}
    assert checked_figures(figures) == figures
    assert checked_figures({}) == {}


@pytest.mark.parametrize(
    ("figures", "says"),
    [
        ({"node": "n1"}, "'node' is 'n1': a finite number"),
        ({"up": True}, "'up' is True: a finite number"),
        ({"rate": float("nan")}, "a finite number"),
        ({"rate": float("inf")}, "a finite number"),
        ({"": 1}, "a name of 1 to 64 characters"),
        ({"x" * 65: 1}, "a name of 1 to 64 characters"),
        ({f"f{i}": i for i in range(33)}, "at most 32 figures"),
        ([1, 2], "a JSON object of numbers"),
    ],
)
def test_figures_that_are_not_numbers_are_refused(figures, says):
    with pytest.raises(BadDecision, match=says.replace("(", r"\(")):
        checked_figures(figures)
