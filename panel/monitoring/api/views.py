from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import status
from rest_framework.decorators import action
from rest_framework.exceptions import ValidationError
from rest_framework.response import Response
from rest_framework.views import APIView

from panel.core.rest.api import ReadOnlyPanelViewSet, StrictRequestMixin
from panel.monitoring.alerting import alerts
from panel.monitoring.api.serializers import (
    AlertSerializer,
    MetricHistorySerializer,
    MetricsIntervalSetSerializer,
    SetMetricsIntervalSerializer,
)
from panel.monitoring.filtersets import AlertFilterSet
from panel.monitoring.metrics import store
from panel.monitoring.metrics.history import HistoryError, node_history
from panel.monitoring.models import Alert
from panel.monitoring.services import set_metrics_interval
from panel.nodes.models import Node

# The node viewset documents its metrics actions with these.
__all__ = [
    "AlertViewSet",
    "HISTORY_PARAMETERS",
    "LatestMetricsView",
    "MetricHistorySerializer",
    "MetricsIntervalSetSerializer",
    "SetMetricsIntervalSerializer",
]


class AlertViewSet(ReadOnlyPanelViewSet):
    queryset = Alert.objects.select_related("node", "acknowledged_by")
    serializer_class = AlertSerializer
    filterset_class = AlertFilterSet

    @extend_schema(request=None, responses=AlertSerializer)
    @action(detail=True, methods=["post"])
    def acknowledge(self, request, pk=None):
        """Acknowledge an alert (operators and admins): it stays open until its condition goes away."""
        return Response(AlertSerializer(alerts.acknowledge(self.get_object(), request.user)).data)


class LatestMetricsView(StrictRequestMixin, APIView):
    """The latest "metrics" message of each visible node (the websocket message, for back-fill after
    subscribing). Repeat `node` to ask for some nodes only."""

    @extend_schema(
        parameters=[OpenApiParameter("node", str, many=True, description="Node names; all when omitted.")],
        responses=OpenApiTypes.OBJECT,
    )
    def get(self, request):
        visible = Node.objects.visible_to(request.user)
        wanted = request.query_params.getlist("node")
        if wanted:
            visible = visible.filter(name__in=wanted)
        names = list(visible.values_list("name", flat=True))
        return Response({"nodes": store.read_latest(names)})


HISTORY_PARAMETERS = [
    OpenApiParameter(
        "since", str, description="ISO 8601 time, or relative: 90s, 5m, 1h, 24h, 7d. Default 1h."
    ),
    OpenApiParameter(
        "step",
        {"type": "integer", "minimum": 1},
        description="Seconds per point; default keeps it under 1000 points.",
    ),
]


def history_response(node: Node, request) -> Response:
    """Shared by NodeViewSet.metrics: columnar history of one node."""
    try:
        data = node_history(node, request.query_params.get("since"), request.query_params.get("step"))
    except HistoryError as error:
        raise ValidationError({error.field: [str(error)]}) from None
    return Response(data)


def set_interval_response(node: Node, request) -> Response:
    serializer = SetMetricsIntervalSerializer(data=request.data)
    serializer.is_valid(raise_exception=True)
    seconds = set_metrics_interval(node, serializer.validated_data["interval_s"], user=request.user)
    return Response({"node": node.name, "interval_s": seconds}, status=status.HTTP_202_ACCEPTED)
