from rest_framework import serializers

from panel.provisioning.models import NodeStack, PackageFile
from panel.provisioning.services import PIP_AUTO, PIP_SOURCES


class PackageFileSerializer(serializers.ModelSerializer):
    file = serializers.FileField(write_only=True, help_text="The .run package or wheel to store.")
    uploaded_by = serializers.SlugRelatedField(slug_field="username", read_only=True)

    class Meta:
        model = PackageFile
        fields = ["id", "name", "kind", "version", "sha256", "size", "uploaded_by", "created", "file"]
        read_only_fields = ["name", "kind", "version", "sha256", "size", "uploaded_by", "created"]


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


class CancelSerializer(serializers.Serializer):
    operation = serializers.UUIDField()
