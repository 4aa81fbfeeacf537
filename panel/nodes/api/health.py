"""An admin's override of an NPU's health state in the API: POST /nodes/{id}/npu-health/ with the NPU
("3/0": NPU id / chip id), the state (ok: mark healthy, uncordon it; suspect; failed) and a note for the
audit log. GET /nodes/{id}/npu-health/ lists the node's history of health changes, newest first."""

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.decorators import action
from rest_framework.response import Response

from panel.core.domain.choices import NpuHealthState
from panel.nodes.health import health_state
from panel.nodes.models import NpuHealthChange

HISTORY_LIMIT = 100


class NpuHealthOverrideSerializer(serializers.Serializer):
    npu = serializers.RegexField(r"^\d{1,5}/\d{1,5}$", help_text='the NPU as "NPU id/chip id", e.g. "3/0"')
    state = serializers.ChoiceField(choices=NpuHealthState.choices)
    note = serializers.CharField(max_length=500, required=False, allow_blank=True, default="")


class NpuHealthChangeSerializer(serializers.ModelSerializer):
    user = serializers.CharField(source="user.username", default=None, read_only=True)

    class Meta:
        model = NpuHealthChange
        fields = ["npu_name", "time", "old", "new", "signal", "detail", "user"]


class NodeHealthMixin:
    """The node viewset's npu-health action (admins write; everyone who may read the node reads)."""

    @extend_schema(request=NpuHealthOverrideSerializer, responses=NpuHealthChangeSerializer(many=True))
    # The history is one bounded list (HISTORY_LIMIT), not a page: the schema must not promise pagination.
    @action(detail=True, methods=["get", "post"], url_path="npu-health", pagination_class=None)
    def npu_health(self, request, pk=None):
        node = self.get_object()
        if request.method == "POST":
            given = NpuHealthOverrideSerializer(data=request.data)
            given.is_valid(raise_exception=True)
            npu_id, chip_id = (int(part) for part in given.validated_data["npu"].split("/"))
            npu = node.npus.filter(npu_id=npu_id, chip_id=chip_id).first()
            if npu is None:
                raise serializers.ValidationError({"npu": [f"{node.name} has no NPU {npu_id}/{chip_id}."]})
            health_state.override(
                npu, given.validated_data["state"], request.user, given.validated_data["note"]
            )
        changes = node.npu_health_changes.select_related("user")[:HISTORY_LIMIT]
        return Response(NpuHealthChangeSerializer(changes, many=True).data)
