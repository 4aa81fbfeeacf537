"""What monitoring's deployment alerts are raised from: after a deployment's change commits, its observed
state (and its primary's, whose replica count it changes) goes out as monitoring's `deployment_observed`
event. Monitoring decides what is an alert (panel/monitoring/alerting/deployment_alerts.py)."""

from django.db import transaction

from panel.core.domain.choices import DeploymentState
from panel.deployments.models import Deployment, Rollout
from panel.monitoring.signals import deployment_observed


def snapshot(deployment: Deployment, changed: Deployment | None = None) -> dict:
    """The deployment as monitoring reads it. `changed`: one of its replicas, counted in the state it has
    in memory (its row may not be saved yet when this runs outside a transaction)."""
    is_primary = deployment.replica_of_id is None
    serving = None
    last_rollout = None
    if is_primary:
        others = deployment.replicas.filter(observed_state=DeploymentState.RUNNING)
        if changed is not None:
            others = others.exclude(pk=changed.pk)
        serving = (
            int(deployment.observed_state == DeploymentState.RUNNING)
            + others.count()
            + int(changed is not None and changed.observed_state == DeploymentState.RUNNING)
        )
        last_rollout = (
            deployment.rollouts.order_by("-created", "-pk").values_list("status", flat=True).first()
        )
    return {
        "name": deployment.name,
        "observed_state": deployment.observed_state,
        "desired_state": deployment.desired_state,
        "reason": deployment.reason,
        "failed_restarts": deployment.failed_restarts,
        "replicas_wanted": deployment.replicas_wanted if is_primary else 1,
        "replicas_serving": serving,
        "rollout_failed": last_rollout == Rollout.FAILED,
        "gone": False,
    }


def observed(deployment: Deployment) -> None:
    """Once the change commits: send the deployment's state as it is in memory, and its primary's."""
    transaction.on_commit(lambda: _send(deployment))


def rollout_failed(deployment: Deployment) -> None:
    """A rollout of `deployment` (a primary) just failed; its row may be saved after this returns."""
    transaction.on_commit(
        lambda: deployment_observed.send(
            sender=Deployment, snapshot={**snapshot(deployment), "rollout_failed": True}
        )
    )


def gone(name: str) -> None:
    snap = {"name": name, "gone": True}
    transaction.on_commit(lambda: deployment_observed.send(sender=Deployment, snapshot=snap))


def _send(deployment: Deployment) -> None:
    deployment_observed.send(sender=Deployment, snapshot=snapshot(deployment))
    primary = (
        Deployment.objects.filter(pk=deployment.replica_of_id).first() if deployment.replica_of_id else None
    )
    if primary is not None:
        deployment_observed.send(sender=Deployment, snapshot=snapshot(primary, changed=deployment))
