from rest_framework import serializers

from panel.fabric.models import FabricCheck, NodeFabric
from panel.operations.models import Operation


class FabricCheckSerializer(serializers.ModelSerializer):
    nodes = serializers.ListField(source="node_names", child=serializers.CharField(), read_only=True)
    checklist = serializers.SerializerMethodField(
        help_text="What the check found: check, status, detail, fix."
    )
    operations = serializers.SerializerMethodField(help_text="The agent operations of the current round.")
    created_by = serializers.SlugRelatedField(slug_field="username", read_only=True, allow_null=True)

    class Meta:
        model = FabricCheck
        fields = [
            "id", "nodes", "deployment", "round", "status", "checklist", "operations", "created_by",
            "created", "finished",
        ]  # fmt: skip
        read_only_fields = fields

    def get_checklist(self, check) -> list[dict]:
        return (check.verdict or {}).get("checklist") or []

    def get_operations(self, check) -> list[str]:
        rows = Operation.objects.filter(params__fabric_check=check.pk, params__round=check.round)
        return [str(pk) for pk in rows.values_list("pk", flat=True)]


class StartFabricCheckSerializer(serializers.Serializer):
    nodes = serializers.ListField(
        child=serializers.SlugField(max_length=63),
        min_length=1,
        max_length=64,
        help_text="Names of the nodes to check together (their NPUs ping each other).",
    )


class NodeFabricSerializer(serializers.ModelSerializer):
    node = serializers.SlugRelatedField(slug_field="name", read_only=True)
    check = serializers.PrimaryKeyRelatedField(source="fabric_check", read_only=True)

    class Meta:
        model = NodeFabric
        fields = ["node", "status", "checked_at", "check", "peers", "npus", "interface", "checklist"]
        read_only_fields = fields
