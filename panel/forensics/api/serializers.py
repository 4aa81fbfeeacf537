from rest_framework import serializers

from panel.forensics.models import DiagnosticsBundle


class DiagnosticsBundleSerializer(serializers.ModelSerializer):
    nodes = serializers.ListField(source="node_names", child=serializers.CharField(), read_only=True)
    first_failure = serializers.SerializerMethodField(help_text="The first rank that failed, across nodes.")
    created_by = serializers.SlugRelatedField(slug_field="username", read_only=True, allow_null=True)

    class Meta:
        model = DiagnosticsBundle
        fields = [
            "id", "deployment", "trigger", "status", "nodes", "first_failure", "summary", "size", "created",
            "finished", "created_by",
        ]  # fmt: skip
        read_only_fields = fields

    def get_first_failure(self, bundle) -> dict | None:
        return (bundle.summary or {}).get("first_failure")


class CollectSerializer(serializers.Serializer):
    deployment = serializers.SlugField(max_length=63, help_text="The deployment whose nodes to collect from.")
