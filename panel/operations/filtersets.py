import django_filters

from panel.operations.models import Operation


class OperationFilterSet(django_filters.FilterSet):
    node = django_filters.CharFilter(field_name="node__name")
    # What it acts on (a deployment's name, a model copy's path …): a deployment's recent operations.
    target = django_filters.CharFilter()

    class Meta:
        model = Operation
        fields = ["kind", "status", "node", "target"]
