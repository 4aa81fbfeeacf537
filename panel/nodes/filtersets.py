import django_filters

from panel.nodes.models import Node


class NodeFilterSet(django_filters.FilterSet):
    name = django_filters.CharFilter(lookup_expr="icontains")

    class Meta:
        model = Node
        fields = ["name", "transport", "cordoned"]
