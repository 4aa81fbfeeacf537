from django.utils.translation import gettext_lazy as _
from rest_framework import serializers

from panel.core.domain.choices import NodeStatus, NodeTransport
from panel.nodes.models import Node, Npu


class NpuSerializer(serializers.ModelSerializer):
    class Meta:
        model = Npu
        fields = [
            "id",
            "npu_id",
            "chip_id",
            "logic_id",
            "device_id",
            "name",
            "health",
            "health_state",
            "health_reason",
            "health_changed_at",
            "hbm_total_mb",
            "memory_total_mb",
            "bus_id",
            "numa_node",
        ]


class NodeSerializer(serializers.ModelSerializer):
    status = serializers.ChoiceField(choices=NodeStatus.choices, source="effective_status", read_only=True)
    npus = NpuSerializer(many=True, read_only=True)

    class Meta:
        model = Node
        fields = [
            "id",
            "name",
            "address",
            "transport",
            "status",
            "labels",
            "cordoned",
            "last_heartbeat",
            "heartbeat_interval",
            "agent_version",
            "ssh_port",
            "ssh_username",
            "ssh_host_key_fingerprint",
            "ssh_env",
            "ssh_host_root",
            "ssh_ascend_root",
            "models_roots",
            "facts",
            "versions",
            "inventory_changes",
            "inventoried_at",
            "npu_smi_info",
            "npus",
            "created",
        ]
        read_only_fields = fields


class JoinTokenSerializer(serializers.Serializer):
    """A new join command for a joined agent node: trading it in rotates the node's credential."""

    rotate_credential = serializers.BooleanField(
        default=False,
        help_text=_("Must be true: the node gets a new credential and its old one stops working."),
    )


class NodeCreateSerializer(serializers.Serializer):
    """Add a node: an agent node gets a join command; an SSH node is stored and its host key shown."""

    name = serializers.SlugField(max_length=63, help_text=_("Letters, digits, - and _."))
    transport = serializers.ChoiceField(choices=NodeTransport.choices, default=NodeTransport.AGENT)
    address = serializers.CharField(max_length=255, required=False, allow_blank=True, default="")
    port = serializers.IntegerField(min_value=1, max_value=65535, default=22)
    username = serializers.CharField(max_length=64, required=False, allow_blank=True, default="")
    client_key = serializers.CharField(
        required=False, allow_blank=True, default="", write_only=True, trim_whitespace=False
    )
    password = serializers.CharField(required=False, allow_blank=True, default="", write_only=True)
    labels = serializers.DictField(child=serializers.CharField(), required=False, default=dict)

    def validate_name(self, value):
        if value.isdigit():
            raise serializers.ValidationError(
                _("A name of digits only would read as an id in API URLs; add a letter.")
            )
        return value

    def validate(self, attrs):
        if attrs["transport"] == NodeTransport.SSH:
            errors = {}
            if not attrs["address"]:
                errors["address"] = [_("An SSH node needs the address the panel connects to.")]
            if not attrs["username"]:
                errors["username"] = [_("An SSH node needs the user the panel logs in as.")]
            if not attrs["client_key"] and not attrs["password"]:
                errors["client_key"] = [_("Give a private key or a password to log in with.")]
            if errors:
                raise serializers.ValidationError(errors)
        return attrs


class ConfirmHostKeySerializer(serializers.Serializer):
    fingerprint = serializers.CharField(max_length=128, help_text=_("SHA256:… as the panel showed it."))


class NodeSettingsSerializer(serializers.Serializer):
    labels = serializers.DictField(child=serializers.CharField(), required=False)
    ssh_env = serializers.DictField(child=serializers.CharField(allow_blank=True), required=False)
    ssh_host_root = serializers.CharField(max_length=255, required=False)
    ssh_ascend_root = serializers.CharField(max_length=255, required=False)
    models_roots = serializers.ListField(
        child=serializers.CharField(max_length=255),
        required=False,
        help_text=_("Absolute folders on the node that model folders, copies and deployments must lie in."),
    )
