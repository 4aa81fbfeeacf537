"""A multi-node launch on NPUs waits for its NPU network check (panel.fabric.services.gate_launch): when the
check ends, the launches go out (it passed or only warned) or the deployment stops, failed, with the first
failure and its fix as the reason. An engine of a disaggregated deployment waits the same way for the check
of its host and the other role's hosts (panel/deployments/launch/pd_fabric.py)."""

from django.utils.translation import gettext_noop

from panel.core.domain.choices import DeploymentState, DesiredState
from panel.deployments import reasons, services
from panel.deployments.models import Deployment
from panel.fabric.models import FabricCheck
from workers.steps.fabric_verdict import first_failure
from workers.steps.preflight import FAIL


def after_gate(check: FabricCheck) -> None:
    deployment = Deployment.objects.select_for_update().filter(name=check.deployment).first()
    if deployment is None or (deployment.runtime or {}).get("fabric_check") != check.pk:
        return  # deleted, or launched again meanwhile: a newer check decides
    if (
        deployment.desired_state != DesiredState.RUNNING
        or deployment.observed_state != DeploymentState.STARTING
    ):
        deployment.save()
        return
    problem = first_failure(check.verdict)
    if problem is None:
        services.move(deployment, DeploymentState.STARTING, "")
        deployment.save()
        services.send_launches(deployment, user=check.created_by)
        return
    templates = problem.get("templates") or {}
    params = problem.get("params") or {}
    # An engine of a disaggregated deployment was checked against the other role's hosts (pd_fabric).
    heading = (
        gettext_noop("The NPU network between the prefill and decode hosts failed its check:")
        if deployment.role
        else gettext_noop("The NPU network check failed:")
    )
    reason = [
        reasons.part(heading),
        reasons.part(templates.get("detail") or problem["detail"], **params),
        reasons.part("—"),
        reasons.part(templates.get("fix") or problem["fix"], **params),
    ]
    failing = [entry for entry in check.verdict["checklist"] if entry["status"] == FAIL]
    deployment.runtime = {**deployment.runtime, "fabric": {"check": check.pk, "failures": failing}}
    deployment.next_restart_at = None
    services.move(deployment, DeploymentState.FAILED, reason)
    deployment.save()
