"""The reconcile loop's decisions: back-off schedule, what a probe means, when restarts give up."""

import pytest

from panel.deployments.rollouts.reconcile import Policy, after_failed_launch, after_probe, backoff_s

POLICY = Policy(unhealthy_after=3, max_restarts=4, backoff_base_s=5, backoff_cap_s=300)


def test_backoff_restarts_at_once_then_doubles_and_caps_at_five_minutes():
    assert [backoff_s(n, POLICY) for n in range(9)] == [0, 5, 10, 20, 40, 80, 160, 300, 300]


def test_a_dead_engine_is_restarted_on_the_first_probe():
    verdict = after_probe("running", 0, alive=False, healthy=False, policy=POLICY)
    assert verdict.state == "unhealthy"
    assert verdict.restart
    assert "exited" in verdict.reason


def test_a_live_engine_failing_health_is_restarted_only_after_n_failures():
    state, failures, restarts = "running", 0, []
    for _ in range(3):
        verdict = after_probe(state, failures, alive=True, healthy=False, policy=POLICY)
        state, failures = verdict.state, verdict.probe_failures
        restarts.append(verdict.restart)
    assert restarts == [False, False, True]
    assert state == "unhealthy"


def test_a_healthy_probe_clears_failures_and_marks_running():
    verdict = after_probe("unhealthy", 2, alive=True, healthy=True, policy=POLICY)
    assert (verdict.state, verdict.probe_failures, verdict.restart) == ("running", 0, False)


@pytest.mark.parametrize(
    ("failed_before", "expected"),
    [(0, ("unhealthy", 1)), (3, ("unhealthy", 4)), (4, ("failed", 5))],
)
def test_failed_launches_retry_until_the_restart_budget_is_spent(failed_before, expected):
    assert after_failed_launch(failed_before, POLICY) == expected
