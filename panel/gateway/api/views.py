from panel.core.rest.api import ReadOnlyPanelViewSet
from panel.gateway.api.serializers import UsageHourSerializer, UsageRecordSerializer
from panel.gateway.filtersets import UsageHourFilterSet, UsageRecordFilterSet
from panel.gateway.models import UsageHour, UsageRecord


class UsageRecordViewSet(ReadOnlyPanelViewSet):
    """Gateway requests, newest first, kept PANEL_GATEWAY_USAGE_RAW_DAYS: key, model, deployment, instance,
    status, tokens (the engine's usage), time to first token and duration. Admins see every key's, others
    their own keys'. Requests reach this list within seconds of ending (a beat task moves them)."""

    queryset = UsageRecord.objects.all()
    serializer_class = UsageRecordSerializer
    filterset_class = UsageRecordFilterSet


class UsageHourViewSet(ReadOnlyPanelViewSet):
    """Hourly sums per key, model and deployment, kept PANEL_GATEWAY_USAGE_HOURLY_DAYS."""

    queryset = UsageHour.objects.all()
    serializer_class = UsageHourSerializer
    filterset_class = UsageHourFilterSet
