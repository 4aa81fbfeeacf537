import django_filters

from panel.operations.models import Operation


class OperationFilterSet(django_filters.FilterSet):
    node = django_filters.CharFilter(field_name="node__name")

    class Meta:
        model = Operation
        fields = ["kind", "status", "node"]
