"""The reconcile loop's restarts as recorded decisions (docs/serving-plane.md §2): a restart in place after
the engine died or a launch failed (with the back-off it waits), giving up after too many failed restarts,
and the start, restart or stop that a deployment reaching running or stopped settles."""

from panel.core.domain.choices import DecisionKind, DecisionOutcome
from panel.deployments import decisions
from panel.deployments.models import Deployment


def restart_decided(deployment: Deployment, reason: list[dict] | str, **figures: float) -> None:
    """The loop starts the engine again (now, or after `after_s`); a restart before it that was still
    pending did not bring the engine up."""
    decisions.settle_pending(deployment, DecisionKind.RESTART, DecisionOutcome.FAILED, reason)
    decisions.record(deployment, DecisionKind.RESTART, reason=reason, figures=figures)


def gave_up(deployment: Deployment, reason: list[dict], failed_restarts: int) -> None:
    """No more restarts: the deployment is failed until someone starts it again."""
    decisions.settle_pending(deployment, DecisionKind.RESTART, DecisionOutcome.FAILED, reason)
    decisions.record(
        deployment,
        DecisionKind.GAVE_UP,
        reason=reason,
        figures={"failed_restarts": failed_restarts},
        outcome=DecisionOutcome.DONE,
    )


def not_restarted(deployment: Deployment, reason: list[dict] | str) -> None:
    """A launch failed for good (the same launch would fail the same way): its pending restart failed."""
    decisions.settle_pending(deployment, DecisionKind.RESTART, DecisionOutcome.FAILED, reason)


def came_up(deployment: Deployment) -> None:
    """The engine runs (again): the start or restart that asked for it is done."""
    decisions.settle_pending(deployment, DecisionKind.RESTART, DecisionOutcome.DONE)
    decisions.settle_pending(deployment, DecisionKind.START, DecisionOutcome.DONE)


def stopped(deployment: Deployment) -> None:
    decisions.settle_pending(deployment, DecisionKind.STOP, DecisionOutcome.DONE)
