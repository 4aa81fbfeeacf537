import django_filters
from django.utils.translation import gettext_lazy as _

from panel.core.rest.filters import StrictBooleanFilter
from panel.monitoring.models import Alert, AlertKind, AlertSeverity


class NameInFilter(django_filters.BaseInFilter, django_filters.CharFilter):
    pass


class AlertFilterSet(django_filters.FilterSet):
    node = django_filters.CharFilter(field_name="node__name", label=_("Node"))
    # The dashboard asks for the open alerts of the nodes on its page in one request.
    nodes = NameInFilter(
        field_name="node__name", label=_("Nodes"), help_text=_("Node names, separated by commas.")
    )
    deployment = django_filters.CharFilter(label=_("Deployment"))
    kind = django_filters.ChoiceFilter(choices=AlertKind.choices, label=_("Kind"))
    severity = django_filters.ChoiceFilter(choices=AlertSeverity.choices, label=_("Severity"))
    open = StrictBooleanFilter(field_name="resolved_at", lookup_expr="isnull", label=_("Open"))
    acknowledged = StrictBooleanFilter(
        field_name="acknowledged_at", lookup_expr="isnull", exclude=True, label=_("Acknowledged")
    )

    class Meta:
        model = Alert
        fields = ["node", "nodes", "deployment", "kind", "severity", "open", "acknowledged"]
