import django_filters
from django.utils.translation import gettext_lazy as _

from panel.core.rest.filters import StrictBooleanFilter
from panel.core.rest.filters import moment_filter as _when
from panel.gateway.models import UsageHour, UsageRecord


class UsageRecordFilterSet(django_filters.FilterSet):
    """/api/v1/usage/: one row per gateway request."""

    key = django_filters.CharFilter(label=_("Key"))
    model = django_filters.CharFilter(label=_("Model"))
    deployment = django_filters.CharFilter(field_name="deployment_name", label=_("Deployment"))
    instance = django_filters.CharFilter(label=_("Instance"))
    status = django_filters.NumberFilter(label=_("Status"))
    errors = StrictBooleanFilter(method="filter_errors", label=_("Errors only"))
    since = _when("time", "gte", _("Since"))
    until = _when("time", "lt", _("Until"))

    class Meta:
        model = UsageRecord
        fields = ["key", "model", "deployment", "instance", "status", "errors", "since", "until"]

    def filter_errors(self, queryset, name, value):
        if value is None:
            return queryset
        return queryset.filter(status__gte=400) if value else queryset.filter(status__lt=400)


class UsageHourFilterSet(django_filters.FilterSet):
    """/api/v1/usage-hourly/ and the usage page's CSV: the hourly sums."""

    key = django_filters.CharFilter(label=_("Key"))
    model = django_filters.CharFilter(label=_("Model"))
    deployment = django_filters.CharFilter(field_name="deployment_name", label=_("Deployment"))
    since = _when("hour", "gte", _("Since"))
    until = _when("hour", "lt", _("Until"))

    class Meta:
        model = UsageHour
        fields = ["key", "model", "deployment", "since", "until"]
