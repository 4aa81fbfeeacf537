from rest_framework import serializers

from panel.core.domain.choices import OperationStatus
from panel.operations.models import Operation, OperationEvent
from panel.operations.texts import translated


class OperationSerializer(serializers.ModelSerializer):
    node = serializers.SlugRelatedField(slug_field="name", read_only=True)
    created_by = serializers.SlugRelatedField(slug_field="username", read_only=True, allow_null=True)

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
            "texts",
            "result",
            "last_seq",
            "final_seq",
        ]
        read_only_fields = fields

    def to_representation(self, instance):
        # stage, error and hint in the request's language (Accept-Language, the language cookie), English by
        # default; `texts` keeps how the agent made them (panel.operations.texts says what each holds).
        return translated(super().to_representation(instance))


class OperationEventSerializer(serializers.ModelSerializer):
    """`seq` is the position in the operation's log; `attempt` and `agent_seq` the delivery that sent the
    event and the agent's own number for it in that delivery (what a client checks for gaps per attempt)."""

    class Meta:
        model = OperationEvent
        fields = ["seq", "attempt", "agent_seq", "time", "kind", "payload"]

    def to_representation(self, instance):
        data = super().to_representation(instance)
        return {**data, "payload": translated(data["payload"] or {})}


class OperationEventPageSerializer(serializers.Serializer):
    """One page of an operation's events; ask again with `after_seq=next_after_seq` while it is set."""

    operation = serializers.UUIDField()
    status = serializers.ChoiceField(choices=OperationStatus.choices)
    last_seq = serializers.IntegerField()
    final_seq = serializers.IntegerField(allow_null=True)
    next_after_seq = serializers.IntegerField(allow_null=True)
    results = OperationEventSerializer(many=True)
