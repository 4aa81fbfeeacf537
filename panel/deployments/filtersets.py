"""Filters shared by the deployment pages and the API."""

import django_filters

from panel.core.choices import DeploymentState
from panel.deployments.models import Benchmark, Deployment


class DeploymentFilterSet(django_filters.FilterSet):
    status = django_filters.ChoiceFilter(field_name="observed_state", choices=DeploymentState.choices)
    node = django_filters.CharFilter(field_name="nodes__name")
    # Bounded like the id column: a number past it reached SQLite as an OverflowError, a 500 (API fuzz).
    model = django_filters.NumberFilter(field_name="model_id", min_value=0, max_value=2**63 - 1)
    search = django_filters.CharFilter(field_name="name", lookup_expr="icontains")

    class Meta:
        model = Deployment
        fields = ["status", "node", "model", "search"]


class BenchmarkFilterSet(django_filters.FilterSet):
    deployment = django_filters.CharFilter(field_name="deployment_name")
    model = django_filters.CharFilter(field_name="model_name")

    class Meta:
        model = Benchmark
        fields = ["deployment", "model", "status"]
