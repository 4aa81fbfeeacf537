import django_filters

from panel.core.filters import StrictBooleanFilter
from panel.nodes.models import Node


class NodeFilterSet(django_filters.FilterSet):
    name = django_filters.CharFilter(lookup_expr="icontains")
    cordoned = StrictBooleanFilter()

    class Meta:
        model = Node
        fields = ["name", "transport", "cordoned"]
