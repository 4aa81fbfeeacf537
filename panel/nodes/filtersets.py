"""Filters shared by the nodes list, the dashboard and the nodes API; each page of a list keeps them."""

import django_filters
from django.db.models import Exists, OuterRef, Q
from django.utils.translation import gettext_lazy as _

from panel.core.domain.choices import NodeStatus
from panel.core.rest.filters import StrictBooleanFilter
from panel.monitoring.metrics.fleet import UNHEALTHY
from panel.monitoring.models import Alert
from panel.nodes.models import Node, Npu

# One page of nodes, on the node list and on the dashboard alike: one size, so the two pages agree.
NODES_PER_PAGE = 50


class NodeFilterSet(django_filters.FilterSet):
    name = django_filters.CharFilter(lookup_expr="icontains", label=_("Name"))
    status = django_filters.ChoiceFilter(
        choices=NodeStatus.choices,
        method="filter_status",
        label=_("Status"),
        help_text=_("The node's status now: offline as soon as it missed three heartbeats."),
    )
    cordoned = StrictBooleanFilter()
    attention = StrictBooleanFilter(
        method="filter_attention",
        label=_("Needs attention"),
        help_text=_("Not online, an open alert, or an NPU whose inventory said Warning, Alarm or Critical."),
    )

    class Meta:
        model = Node
        fields = ["name", "status", "transport", "cordoned", "attention"]

    def filter_status(self, queryset, name, value):
        return queryset.with_live_status().filter(live_status=value)

    def filter_attention(self, queryset, name, value):
        if value is None:
            return queryset
        troubled = (
            ~Q(live_status=NodeStatus.ONLINE)
            | Q(Exists(Alert.objects.open().filter(node=OuterRef("pk"))))
            | Q(Exists(Npu.objects.filter(node=OuterRef("pk"), health__in=UNHEALTHY)))
        )
        queryset = queryset.with_live_status()
        return queryset.filter(troubled) if value else queryset.exclude(troubled)
