"""Filters shared by the deployment pages and the API."""

import django_filters
from django import forms
from django.core.exceptions import ValidationError
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema_field

from panel.core.domain.choices import DeploymentState
from panel.core.domain.labels import parse_selector, selector_q
from panel.deployments.models import Benchmark, Deployment

MAX_SELECTOR_LENGTH = 4096


class LabelSelectorFormField(forms.CharField):
    """The selector's text, cleaned into its requirements; a bad one is the form's error (a 400 naming
    `labels`), never a 500 from the query."""

    def to_python(self, value):
        text = super().to_python(value)
        if not text:
            return []
        if len(text) > MAX_SELECTOR_LENGTH:
            message = _("A label selector is at most {limit} characters.").format(limit=MAX_SELECTOR_LENGTH)
            raise ValidationError(message, code="selector")
        try:
            return parse_selector(text)
        except ValueError as error:
            raise ValidationError(str(error), code="selector") from None


@extend_schema_field(OpenApiTypes.STR)
class LabelSelectorFilter(django_filters.Filter):
    """`?labels=app=chat,tier!=dev,gpu,!canary`: deployments whose labels meet every requirement."""

    field_class = LabelSelectorFormField

    def filter(self, qs, value):
        return qs.filter(selector_q(value, self.field_name)) if value else qs


class DeploymentFilterSet(django_filters.FilterSet):
    status = django_filters.ChoiceFilter(field_name="observed_state", choices=DeploymentState.choices)
    node = django_filters.CharFilter(field_name="nodes__name")
    # Bounded like the id column: a number past it reached SQLite as an OverflowError, a 500 (API fuzz).
    model = django_filters.NumberFilter(field_name="model_id", min_value=0, max_value=2**63 - 1)
    search = django_filters.CharFilter(field_name="name", lookup_expr="icontains")
    labels = LabelSelectorFilter(
        field_name="labels",
        label=gettext_lazy("Label selector"),
        help_text=gettext_lazy(
            "Label selector: key=value, key!=value (also where the key is missing), key (it is there), "
            "!key (it is not), joined by commas; every requirement must hold. Example: app=chat,tier!=dev."
        ),
    )

    class Meta:
        model = Deployment
        fields = ["status", "node", "model", "search", "labels"]


class BenchmarkFilterSet(django_filters.FilterSet):
    deployment = django_filters.CharFilter(field_name="deployment_name")
    model = django_filters.CharFilter(field_name="model_name")

    class Meta:
        model = Benchmark
        fields = ["deployment", "model", "status"]
