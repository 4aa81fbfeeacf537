from rest_framework import serializers

from panel.operations.models import Operation, OperationEvent


class OperationSerializer(serializers.ModelSerializer):
    node = serializers.SlugRelatedField(slug_field="name", read_only=True)
    created_by = serializers.SlugRelatedField(slug_field="username", read_only=True)

    class Meta:
        model = Operation
        fields = [
            "id",
            "kind",
            "node",
            "target",
            "params",
            "status",
            "progress",
            "stage",
            "created_by",
            "created",
            "started",
            "finished",
            "error",
            "hint",
            "result",
            "last_seq",
            "final_seq",
        ]
        read_only_fields = fields


class OperationEventSerializer(serializers.ModelSerializer):
    class Meta:
        model = OperationEvent
        fields = ["seq", "time", "kind", "payload"]
