"""What `?wait=running|stopped|deleted` means for a deployment; panel/core/rest/streams.py does the waiting.

- running: reached when it runs, with every replica of its spec running and no rolling update under way (a
  rollout that ends failed still answers 200, its `rollout` saying so; the CLI exits 1 on it). Failed when it
  is `failed`, or `unhealthy` (a start that did not come up; the reconcile loop may retry it after a
  back-off, but a script wants to know now), when it is no longer meant to run (stopped or deleted by
  someone else meanwhile), or when it is gone.
- stopped: reached when it is stopped and meant to be (a restart passes through stopped on its way back
  up). Failed when it is meant to run again, or when it is gone.
- deleted: reached when its row is gone. A DELETE waits for nothing else.

Answers: 200 the action's usual body with the deployment read again; 409 {detail, deployment, findings,
log_tail}; 408 {detail, deployment}.
"""

from django.utils.translation import gettext as _
from rest_framework import serializers

from panel.core.domain.choices import DeploymentState, DesiredState
from panel.core.rest.streams import FAILED, REACHED, TIMED_OUT
from panel.core.templatetags.panel_text import deployment_reason
from panel.deployments.api.serializers import DeploymentSerializer
from panel.deployments.models import Deployment, Rollout
from panel.deployments.services import active_operations
from panel.realtime.broadcast import deployment_group

RUNNING, STOPPED, DELETED = "running", "stopped", "deleted"
LOG_TAIL_LINES = 50


class WaitFailedSerializer(serializers.Serializer):
    detail = serializers.CharField(help_text="What happened instead, and the deployment's reason.")
    deployment = DeploymentSerializer(required=False, allow_null=True, help_text="null once it is gone.")
    findings = serializers.ListField(
        child=serializers.DictField(), required=False, help_text="Known Ascend error signatures in its log."
    )
    log_tail = serializers.ListField(
        child=serializers.CharField(), required=False, help_text="The last log lines of the failed start."
    )


class WaitTimedOutSerializer(serializers.Serializer):
    detail = serializers.CharField(help_text="The state it is in instead.")
    deployment = DeploymentSerializer(allow_null=True, help_text="null once it is gone.")


def outcome(target: str, observed: str | None, desired: str | None) -> str | None:
    """REACHED, FAILED, or None while it may still get there. `observed` None: the deployment is gone."""
    if target == DELETED:
        return REACHED if observed is None else None
    if observed is None:
        return FAILED
    if target == RUNNING:
        if desired != DesiredState.RUNNING:
            return FAILED
        if observed == DeploymentState.RUNNING:
            return REACHED
        return FAILED if observed in (DeploymentState.FAILED, DeploymentState.UNHEALTHY) else None
    if desired == DesiredState.RUNNING:
        return FAILED
    return REACHED if observed == DeploymentState.STOPPED and desired == DesiredState.STOPPED else None


class DeploymentWaiter:
    targets = (RUNNING, STOPPED, DELETED)
    failed_serializer = WaitFailedSerializer
    timed_out_serializer = WaitTimedOutSerializer

    def targets_for(self, action: str) -> tuple[str, ...]:
        return (DELETED,) if action == "destroy" else self.targets

    def subject(self, data) -> tuple[str, int | None] | None:
        """(name, id) of the deployment an answer is about; None when there is nothing to wait for."""
        if not isinstance(data, dict) or data.get("dry_run"):
            return None
        deployment = data["deployment"] if isinstance(data.get("deployment"), dict) else data
        name = deployment.get("name")
        return (name, deployment.get("id")) if name else None

    def group(self, subject) -> str:
        return deployment_group(subject[0])

    def is_change(self, subject):
        name = subject[0]
        return lambda message: message.get("type") == "deployment.status" and message.get("name") == name

    def check(self, subject, target: str, user) -> tuple[str | None, Deployment | None]:
        name, pk = subject
        # By id where the answer had one: a new deployment of the same name is not the one waited for.
        found = Deployment.objects.visible_to(user).filter(**({"pk": pk} if pk else {"name": name}))
        deployment = found.select_related("model").prefetch_related("nodes", "npus__node").first()
        if deployment is None:
            return outcome(target, None, None), None
        result = outcome(target, deployment.observed_state, deployment.desired_state)
        if result == REACHED and target == RUNNING and not all_replicas_settled(deployment):
            return None, deployment
        # Stopped is reached once its stop operation has ended too: the engine's exit can be seen before the
        # stop's last event lands, and a start sent on the answer would be refused (409) in that gap.
        if result == REACHED and target == STOPPED and active_operations(deployment).exists():
            return None, deployment
        return result, deployment

    def answer(self, data, target: str, timeout: float, result: str, deployment) -> tuple[int, dict]:
        fresh = DeploymentSerializer(deployment).data if deployment is not None else None
        subject = self.subject(data)
        name = (fresh or {}).get("name") or (subject[0] if subject is not None else "")
        if result == REACHED:
            return 200, refreshed(data, fresh)
        if result == TIMED_OUT:
            detail = _("{name} did not reach {target} within {timeout} s (it is {status}).").format(
                name=name, target=target, timeout=f"{timeout:g}", status=fresh["status"] if fresh else DELETED
            )
            return 408, {"detail": detail, "deployment": fresh}
        findings = fresh["findings"] if fresh else {"findings": [], "log_tail": []}
        return 409, {
            "detail": failure_detail(name, target, deployment),
            "deployment": fresh,
            "findings": findings["findings"],
            "log_tail": findings["log_tail"] or recent_log_lines(deployment),
        }


def refreshed(data: dict, fresh: dict | None) -> dict:
    if fresh is None:  # deleted, as asked
        return {**data, "deleted": True} if "deleted" in data else dict(data)
    if isinstance(data.get("deployment"), dict):  # apply: {result, changes, deployment, ...}
        return {**data, "deployment": fresh}
    return {**data, **fresh}  # the deployment itself (create keeps its planner warnings)


def all_replicas_settled(deployment: Deployment) -> bool:
    """Whether a running primary's replicas run too and no rollout moves them (read again at each recheck,
    PANEL_WAIT_RECHECK_S: their changes are not on the primary's group)."""
    if deployment.rollouts.filter(status=Rollout.RUNNING).exists():
        return False
    replicas = deployment.replicas.filter(desired_state=DesiredState.RUNNING)
    return not replicas.exclude(observed_state=DeploymentState.RUNNING).exists()


def failure_detail(name: str, target: str, deployment) -> str:
    if deployment is None:
        return _("{name} was deleted before it reached {target}.").format(name=name, target=target)
    wanted = deployment.desired_state
    if (target == RUNNING and wanted != DesiredState.RUNNING) or (target == STOPPED and wanted == RUNNING):
        return _("{name} will not reach {target}: it is now meant to be {wanted}.").format(
            name=name, target=target, wanted=wanted
        )
    reason = deployment_reason(deployment)
    detail = _("{name} did not reach {target}: it is {status}.").format(
        name=name, target=target, status=deployment.observed_state
    )
    return f"{detail} {reason}" if reason else detail


def recent_log_lines(deployment) -> list[str]:
    """The deployment's last log lines, for a failure whose start left no log tail of its own."""
    if deployment is None:
        return []
    lines = deployment.log_lines.order_by("-seq").values_list("line", flat=True)[:LOG_TAIL_LINES]
    return list(reversed(lines))
