from rest_framework import serializers

from panel.provisioning.models import NodeStack, PackageFile
from panel.provisioning.services import PIP_AUTO, PIP_SOURCES


class PackageFileSerializer(serializers.ModelSerializer):
    file = serializers.FileField(write_only=True, help_text="The .run package or wheel to store.")
    vendor_sha256 = serializers.CharField(
        write_only=True,
        required=False,
        allow_blank=True,
        default="",
        max_length=64,
        help_text="The SHA-256 the vendor publishes for the file (required for .run packages and wheels).",
    )
    uploaded_by = serializers.SlugRelatedField(slug_field="username", read_only=True)
    pending_uploaded_by = serializers.SlugRelatedField(slug_field="username", read_only=True)

    class Meta:
        model = PackageFile
        fields = [
            "id",
            "name",
            "kind",
            "version",
            "sha256",
            "size",
            "uploaded_by",
            "created",
            "pending_sha256",
            "pending_size",
            "pending_uploaded_by",
            "pending_at",
            "file",
            "vendor_sha256",
        ]
        read_only_fields = [name for name in fields if name not in ("id", "file", "vendor_sha256")]


class ConfirmReplacementSerializer(serializers.Serializer):
    sha256 = serializers.CharField(
        max_length=64, help_text="The pending file's SHA-256, as checked against the vendor's."
    )


class NodeStackSerializer(serializers.ModelSerializer):
    node = serializers.SlugRelatedField(slug_field="name", read_only=True)

    class Meta:
        model = NodeStack
        fields = [
            "node",
            "status",
            "profile",
            "record",
            "installed_at",
            "plan",
            "failed_step",
            "install_operation",
            "preflight_operation",
            "preflight_profile",
            "preflight",
            "preflight_worst",
            "preflight_at",
        ]


class StartSerializer(serializers.Serializer):
    profile = serializers.CharField(help_text='A vllm-ascend release of the matrix ("0.11.0") or "cpu".')
    pip_source = serializers.ChoiceField(choices=PIP_SOURCES, default=PIP_AUTO)
    allow_reboot = serializers.BooleanField(default=False)


class InstallSerializer(StartSerializer):
    overrides = serializers.DictField(
        child=serializers.CharField(max_length=500, allow_blank=False),
        required=False,
        default=dict,
        help_text="Admins only: run over failed preflight checks, each named with the reason "
        '({"chip": "the card was replaced; inventory is stale"}). Audited.',
    )


class CancelSerializer(serializers.Serializer):
    operation = serializers.UUIDField()
