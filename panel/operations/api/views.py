from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework.decorators import action
from rest_framework.exceptions import ValidationError
from rest_framework.response import Response

from panel.core.api import ReadOnlyPanelViewSet
from panel.operations.api.serializers import (
    OperationEventPageSerializer,
    OperationEventSerializer,
    OperationSerializer,
)
from panel.operations.filtersets import OperationFilterSet
from panel.operations.models import Operation

MAX_EVENTS_PER_PAGE = 2000


class OperationViewSet(ReadOnlyPanelViewSet):
    queryset = Operation.objects.select_related("node", "created_by")
    serializer_class = OperationSerializer
    filterset_class = OperationFilterSet

    @extend_schema(
        parameters=[
            OpenApiParameter("after_seq", int, description="Only events with a larger sequence number."),
            OpenApiParameter("limit", int, description=f"At most this many (≤ {MAX_EVENTS_PER_PAGE})."),
        ],
        responses=OperationEventPageSerializer,
        filters=False,
    )
    @action(detail=True, methods=["get"])
    def events(self, request, pk=None):
        """Events in sequence order; `next_after_seq` is set when more remain."""
        operation = self.get_object()
        try:
            after = int(request.query_params.get("after_seq", 0))
            limit = min(int(request.query_params.get("limit", MAX_EVENTS_PER_PAGE)), MAX_EVENTS_PER_PAGE)
        except ValueError:
            raise ValidationError({"after_seq": ["after_seq and limit must be whole numbers."]}) from None
        events = list(operation.events.filter(seq__gt=after).order_by("seq")[: limit + 1])
        more = len(events) > limit
        events = events[:limit]
        return Response(
            {
                "operation": str(operation.id),
                "status": operation.status,
                "last_seq": operation.last_seq,
                "final_seq": operation.final_seq,
                "next_after_seq": events[-1].seq if more else None,
                "results": OperationEventSerializer(events, many=True).data,
            }
        )
