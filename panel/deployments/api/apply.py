"""The answer of `PUT /api/v1/deployments/{name}/` (apply) and of `POST /plan/` with a spec body."""

from typing import Any

from rest_framework import serializers

from panel.deployments.api.serializers import DeploymentSerializer, RolloutSerializer
from panel.deployments.apply import Outcome
from panel.deployments.request import ENGINE_SETTINGS
from panel.deployments.rollouts import progress

SPEC_ONLY_KEYS = ("engine", "placement", "replicas", "state", "labels")


class ChangeSerializer(serializers.Serializer):
    field = serializers.CharField(help_text="e.g. engine.max_model_len, placement, model, state")
    # "from"/"to" are Python keywords: declared below
    vars()["from"] = serializers.JSONField(allow_null=True)
    vars()["to"] = serializers.JSONField(allow_null=True)


class ReplicaCountSerializer(serializers.Serializer):
    wanted = serializers.IntegerField(help_text="The spec's replicas.")
    now = serializers.IntegerField(help_text="Replicas there were before this apply (0: created).")


class SpecAnswerSerializer(serializers.Serializer):
    """`GET /deployments/{name}/?format=spec`: the spec PUT takes back (docs/deployment-spec.md)."""

    name = serializers.CharField()
    model = serializers.CharField()
    path = serializers.CharField(required=False)
    artifact = serializers.IntegerField(required=False)
    placement = serializers.DictField(required=False, help_text="{node, npus: [logic ids]}")
    nodes = serializers.ListField(child=serializers.DictField(), required=False)
    engine = serializers.DictField()
    replicas = serializers.IntegerField()
    runtime = serializers.CharField()
    image = serializers.CharField(required=False)
    state = serializers.ChoiceField(["running", "stopped"])
    labels = serializers.DictField(
        child=serializers.CharField(allow_blank=True), required=False, help_text="When it has any."
    )


class ApplyAnswerSerializer(serializers.Serializer):
    result = serializers.ChoiceField(
        ["created", "unchanged", "changed", "waiting"],
        help_text="waiting: the model's folder was registered and is being inspected; apply again once "
        "`inspection` (an operation) has ended.",
    )
    dry_run = serializers.BooleanField()
    effect = serializers.ChoiceField(
        ["none", "create", "restart", "move_npus", "start", "stop", "scale", "rolling"],
        help_text="What applying does to the engine.",
    )
    changes = ChangeSerializer(many=True)
    deployment = DeploymentSerializer(allow_null=True, help_text="Null on a dry run that would create it.")
    plan = serializers.DictField(allow_null=True, help_text="The review: fits, chip, plan, warnings, nodes.")
    warnings = serializers.ListField(child=serializers.DictField())
    replicas = ReplicaCountSerializer()
    rollout = RolloutSerializer(allow_null=True, help_text="The rolling update this apply started.")
    inspection = serializers.UUIDField(allow_null=True, help_text="With result waiting: the inspection.")
    spec = SpecAnswerSerializer(
        allow_null=True,
        help_text="On a dry run: the spec the deployment would have once applied (`?format=spec`'s shape; "
        "its own spec when unchanged); null on a real apply or when nothing could be planned yet.",
    )


def answer_of(outcome: Outcome, dry_run: bool) -> dict[str, Any]:
    deployment = outcome.deployment
    return {
        "result": outcome.result,
        "dry_run": dry_run,
        "effect": outcome.effect,
        "changes": outcome.changes,
        "deployment": DeploymentSerializer(deployment).data if deployment is not None else None,
        "plan": outcome.planned.as_review() if outcome.planned is not None else None,
        "warnings": outcome.warnings,
        "replicas": outcome.replicas,
        "rollout": progress(outcome.rollout),
        "inspection": outcome.inspection,
        "spec": outcome.spec,
    }


def is_spec(body: Any) -> bool:
    """A spec, not the wizard's request: it has a spec-only key, or names the model instead of its id."""
    if not isinstance(body, dict) or any(key in body for key in ENGINE_SETTINGS):
        return False
    model = body.get("model")
    return (
        any(key in body for key in SPEC_ONLY_KEYS)
        or (isinstance(model, str) and not model.isdigit())
        or ("model" not in body and "path" in body and "nodes" not in body)
    )
