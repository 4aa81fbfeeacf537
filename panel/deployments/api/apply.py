"""The answer of `PUT /api/v1/deployments/{name}/` (apply) and of `POST /plan/` with a spec body."""

from typing import Any

from rest_framework import serializers

from panel.deployments.api.serializers import DeploymentSerializer, RolloutSerializer
from panel.deployments.rollouts.rollouts import progress
from panel.deployments.spec.apply import Outcome
from panel.deployments.spec.request import ENGINE_SETTINGS

SPEC_ONLY_KEYS = ("engine", "placement", "replicas", "state", "labels", "autoscale")


class ChangeSerializer(serializers.Serializer):
    field = serializers.CharField(
        help_text="e.g. engine.max_model_len, placement, model, state; with roles also replicas, autoscale "
        "and `replicas (autoscaler)` (each with its role), roles.decode.engine.max_model_len, roles (plain "
        "<-> prefill/decode), kv_connector"
    )
    role = serializers.ChoiceField(
        ["", "prefill", "decode"],
        required=False,
        help_text="The role a line of a disaggregated deployment is about.",
    )
    # "from"/"to" are Python keywords: declared below
    vars()["from"] = serializers.JSONField(allow_null=True)
    vars()["to"] = serializers.JSONField(allow_null=True)


class ReplicaCountSerializer(serializers.Serializer):
    wanted = serializers.IntegerField(help_text="The spec's replicas.")
    now = serializers.IntegerField(help_text="Replicas there were before this apply (0: created).")


class StepSerializer(serializers.Serializer):
    """What a change of a disaggregated deployment (or to or from one) does to one engine."""

    action = serializers.ChoiceField(
        ["start", "create", "roll", "restart", "update", "stop"],
        help_text="start: a new engine; create: a new engine, stopped (a stopped spec); roll: replaced one "
        "at a time, a surge of its role first where NPUs allow; restart: takes its new launch and restarts "
        "at once (a change of topology kind); update: takes its new launch for its next start (it does not "
        "serve); stop: removed.",
    )
    name = serializers.CharField()
    role = serializers.ChoiceField(["", "prefill", "decode"])


class ScaleRequestSerializer(serializers.Serializer):
    """`POST /deployments/{name}/scale/`: the replica count, per role for a disaggregated deployment."""

    replicas = serializers.IntegerField(min_value=1, max_value=64, help_text="The new count (of the role).")
    role = serializers.ChoiceField(
        ["", "prefill", "decode"],
        required=False,
        default="",
        help_text="Needed for a deployment with roles (prefill or decode); refused for a plain one.",
    )


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
    autoscale = serializers.DictField(
        required=False,
        help_text="When set: {min, max, target: {one figure}, up_after_s, down_after_s}. Plain replicas "
        "only: with roles each role carries its own.",
    )
    routing = serializers.CharField(required=False, help_text="When not least_outstanding.")
    idle = serializers.DictField(required=False, help_text="When set: {sleep_after_s, level}.")
    kv_connector = serializers.CharField(required=False, help_text="With roles: mooncake or nixl.")
    roles = serializers.DictField(
        required=False,
        help_text="A disaggregated deployment's {prefill: {replicas, placement, engine, autoscale}, decode: "
        "{...}}; a role's autoscale only when its count follows the load (prefill on ttft_p90_ms or "
        "waiting_per_replica, decode on waiting_per_replica or kv_usage).",
    )


class ApplyAnswerSerializer(serializers.Serializer):
    result = serializers.ChoiceField(
        ["created", "unchanged", "changed", "waiting"],
        help_text="waiting: the model's folder was registered and is being inspected; apply again once "
        "`inspection` (an operation) has ended.",
    )
    dry_run = serializers.BooleanField()
    effect = serializers.ChoiceField(
        ["none", "create", "restart", "move_npus", "start", "stop", "scale", "rolling", "topology"],
        help_text="What applying does to the engine. topology: a change of kind (plain <-> prefill/decode, "
        "or the KV connector): every engine restarts at once with its new launch (see steps).",
    )
    changes = ChangeSerializer(many=True)
    deployment = DeploymentSerializer(allow_null=True, help_text="Null on a dry run that would create it.")
    plan = serializers.DictField(allow_null=True, help_text="The review: fits, chip, plan, warnings, nodes.")
    warnings = serializers.ListField(child=serializers.DictField())
    replicas = ReplicaCountSerializer()
    rollout = RolloutSerializer(allow_null=True, help_text="The rolling update this apply started.")
    steps = StepSerializer(
        many=True,
        required=False,
        help_text="With roles (or to or from them): what the change does to each engine, in order.",
    )
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
        "steps": outcome.steps,
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
