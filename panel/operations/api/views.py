from django.utils.translation import gettext as _
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers
from rest_framework.decorators import action
from rest_framework.response import Response

from panel.accounts.roles import ADMIN
from panel.core.rest.api import ReadOnlyPanelViewSet
from panel.core.rest.streams import StreamsMixin
from panel.core.rest.watch import WatchSpec
from panel.operations.api.serializers import (
    OperationEventPageSerializer,
    OperationEventSerializer,
    OperationSerializer,
)
from panel.operations.filtersets import OperationFilterSet
from panel.operations.models import Operation
from panel.operations.reaper import force_fail
from panel.realtime.broadcast import OPERATIONS, operation_group

MAX_EVENTS_PER_PAGE = 2000
LARGEST_SEQ = 2**31 - 1  # OperationEvent.seq is a PositiveIntegerField


class EventQuerySerializer(serializers.Serializer):
    """Checks the events query: a negative limit broke the slice, a huge after_seq the database (500s)."""

    after_seq = serializers.IntegerField(
        min_value=0, max_value=LARGEST_SEQ, default=0, help_text="Only events with a larger sequence number."
    )
    limit = serializers.IntegerField(
        min_value=1,
        default=MAX_EVENTS_PER_PAGE,
        help_text=f"At most this many (larger asks get {MAX_EVENTS_PER_PAGE}).",
    )


class ForceFailSerializer(serializers.Serializer):
    reason = serializers.CharField(max_length=200, required=False, allow_blank=True, default="")


class OperationViewSet(StreamsMixin, ReadOnlyPanelViewSet):
    """Operations; `?watch=true` streams them as they change (docs/api-streams.md)."""

    queryset = Operation.objects.select_related("node", "created_by")
    serializer_class = OperationSerializer
    filterset_class = OperationFilterSet
    lookup_name_field = None  # operations are addressed by their UUID only
    write_role = ADMIN  # the one write here: force-failing a stuck operation
    watch = WatchSpec(
        event="operation",
        key="id",
        list_group=OPERATIONS,
        detail_group=lambda operation: operation_group(operation.id),
        change_type="operation.status",
        change_field="operation",
    )

    @extend_schema(
        request=ForceFailSerializer,
        responses={200: OperationSerializer, 409: OpenApiResponse(description="The operation had ended.")},
    )
    @action(detail=True, methods=["post"], url_path="force-fail")
    def force_fail(self, request, pk=None):
        """End a stuck operation as failed (admins); whatever waits on it (a stop, a delete, an install)
        moves on as after any failure. 409 when it had ended already."""
        operation = self.get_object()
        body = ForceFailSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        if not force_fail(operation, request.user, body.validated_data["reason"]):
            return Response({"detail": _("The operation had already ended.")}, status=409)
        operation.refresh_from_db()
        return Response(OperationSerializer(operation, context={"request": request}).data)

    @extend_schema(
        parameters=[EventQuerySerializer],
        responses=OperationEventPageSerializer,
        filters=False,
    )
    @action(detail=True, methods=["get"])
    def events(self, request, pk=None):
        """Events in sequence order; `next_after_seq` is set when more remain."""
        operation = self.get_object()
        query = EventQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        after = query.validated_data["after_seq"]
        limit = min(query.validated_data["limit"], MAX_EVENTS_PER_PAGE)
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
