"""The deployment request, as the wizard, POST /api/v1/deployments/ and a spec's `engine:` block send it:
its fields checked one by one (DRF serializers), and who may set which engine flags. Whether the request
fits the chosen NPUs is the planner's to say (panel.deployments.placement.planning).
"""

from __future__ import annotations

from typing import Any

from django.utils.translation import gettext as _
from rest_framework import serializers

from panel.accounts.roles import ADMIN, has_role
from panel.catalog.models import Model, ModelArtifact
from panel.core.domain.choices import DesiredState
from panel.core.domain.errors import NotAllowed
from panel.core.domain.names import DEPLOYMENT_NAME
from panel.core.rest.names import NameField
from panel.deployments.launch.launch_tuning import MAX_MTP_TOKENS, env_problems
from panel.deployments.models import Deployment
from workers.engine.launch.flags import FlagError, code_loading_flags, flag_arguments


class NodeChoiceSerializer(serializers.Serializer):
    node = serializers.SlugField(max_length=63)
    npus = serializers.ListField(child=serializers.IntegerField(min_value=0), allow_empty=True, default=list)


class IdleSerializer(serializers.Serializer):
    """`idle:` an engine that served nothing for `sleep_after_s` is put to sleep at `level` (1 keeps the
    weights in host memory and wakes in seconds; 2 drops them and frees the most)."""

    sleep_after_s = serializers.IntegerField(
        min_value=60, max_value=7 * 24 * 3600, help_text="Seconds without a request before it sleeps."
    )
    level = serializers.ChoiceField([1, 2], default=1, help_text="vLLM's sleep level: 1 or 2.")


class TuningFields(serializers.Serializer):
    """Request fields for the launch's tuning (panel.deployments.launch.launch_tuning), shared by the wizard
    and the API."""

    env = serializers.DictField(
        child=serializers.CharField(allow_blank=True, max_length=4096, trim_whitespace=False),
        required=False,
        default=dict,
    )
    mtp_tokens = serializers.IntegerField(required=False, default=0, min_value=0, max_value=MAX_MTP_TOKENS)

    def validate_env(self, value):
        if problems := env_problems(value):
            raise serializers.ValidationError(problems)
        return value


class EngineSettingsSerializer(TuningFields):
    """The wizard's engine settings (also a spec's `engine:` block). Left empty, the planner chooses."""

    tensor_parallel_size = serializers.IntegerField(required=False, allow_null=True, min_value=1)
    data_parallel_size = serializers.IntegerField(required=False, allow_null=True, min_value=1)
    max_model_len = serializers.IntegerField(required=False, allow_null=True, min_value=16)
    dtype = serializers.ChoiceField(["auto", "bfloat16", "float16", "float32"], default="auto")
    gpu_memory_utilization = serializers.FloatField(default=0.9, min_value=0.05, max_value=1.0)
    quantization = serializers.ChoiceField(["ascend"], required=False, allow_null=True, default=None)
    enforce_eager = serializers.BooleanField(default=False)
    served_model_name = serializers.CharField(required=False, allow_blank=True, default="", max_length=128)
    port = serializers.IntegerField(required=False, allow_null=True, min_value=1024, max_value=65535)
    extra_flags = serializers.DictField(required=False, default=dict)

    def validate_extra_flags(self, value):
        try:
            flag_arguments(value)
        except FlagError as error:
            raise serializers.ValidationError(str(error)) from None
        return value


ENGINE_SETTINGS = tuple(EngineSettingsSerializer().fields)


class DeploymentRequestSerializer(EngineSettingsSerializer):
    """The wizard's request: what to serve, where, and the engine settings.

    With context `replacing` (a deployment that an apply changes), its own name and NPUs are not in the way.
    """

    name = NameField(DEPLOYMENT_NAME)
    model = serializers.PrimaryKeyRelatedField(queryset=Model.objects.all())
    artifact = serializers.PrimaryKeyRelatedField(
        queryset=ModelArtifact.objects.all(), required=False, allow_null=True
    )
    path = serializers.CharField(required=False, allow_blank=True, default="")
    nodes = NodeChoiceSerializer(many=True, allow_empty=False)
    runtime = serializers.ChoiceField(["process", "container"], default="process")
    image = serializers.CharField(
        required=False, allow_blank=True, default="", max_length=255, help_text="runtime container: the image"
    )
    idle = IdleSerializer(required=False, allow_null=True, default=None)
    share_npus = serializers.BooleanField(
        default=False,
        help_text="Share the chosen NPUs with other deployments that share theirs, when the HBM adds up "
        "(each takes its gpu_memory_utilization of an NPU).",
    )

    def validate_name(self, value):
        others = Deployment.objects.filter(name=value).exclude(desired_state=DesiredState.DELETED)
        replacing = self.context.get("replacing")
        if replacing is not None:
            others = others.exclude(pk=replacing.pk)
        if others.exists():
            raise serializers.ValidationError(_("A deployment with this name exists."))
        return value

    def validate_path(self, value):
        if value and not value.startswith("/"):
            raise serializers.ValidationError(_("Give the model folder as an absolute path on the node."))
        return value


class AdminOnlyFlag(NotAllowed):
    """403: the request sets a flag that loads code or files on the node, and the user is not an admin."""


def refuse_admin_only_flags(extra_flags: dict[str, Any], user) -> None:
    """Operators may tune the engine, not make it run code: the code-loading flags are for admins."""
    flags = code_loading_flags(extra_flags)
    if flags and not has_role(user, ADMIN):
        raise AdminOnlyFlag(
            _(
                "Only an admin may set %(flags)s: it makes the engine load code or files from the node, "
                "which runs as root there. Remove it, or ask an admin to deploy this."
            )
            % {"flags": ", ".join(flags)}
        )
