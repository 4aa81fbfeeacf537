"""Filters shared by the apps' FilterSets."""

from datetime import UTC

import django_filters
from django import forms
from django.utils.translation import gettext_lazy as _

TRUE_WORDS = {"true", "1", "yes", "on", "2"}  # "2"/"3": Django's NullBooleanSelect values
FALSE_WORDS = {"false", "0", "no", "off", "3"}
ANY_WORDS = {"", "unknown"}


class StrictNullBooleanSelect(forms.NullBooleanSelect):
    """The usual Unknown/Yes/No select, but hands an unrecognised value on to the field (Django's widget
    turns it into "no filter", so `?open=maybe` silently listed everything)."""

    def value_from_datadict(self, data, files, name):
        value = data.get(name)
        return value if isinstance(value, str) else super().value_from_datadict(data, files, name)


class StrictNullBooleanField(forms.NullBooleanField):
    widget = StrictNullBooleanSelect

    def to_python(self, value):
        if value is None or isinstance(value, bool):
            return value
        word = str(value).strip().lower()
        if word in ANY_WORDS:
            return None
        if word in TRUE_WORDS:
            return True
        if word in FALSE_WORDS:
            return False
        raise forms.ValidationError(_("Use true or false."), code="invalid")


class StrictBooleanFilter(django_filters.BooleanFilter):
    """A yes/no filter that refuses values it does not understand (400 naming the field on the API)."""

    field_class = StrictNullBooleanField


class UtcDateTimeField(forms.DateTimeField):
    """A moment written with any offset ISO 8601 allows, handed to the database in UTC: PostgreSQL refuses
    offsets past ±15:59 (`…T16:04:25-23:11` was a 500)."""

    def to_python(self, value):
        moment = super().to_python(value)
        if moment is None:
            return None
        try:
            return moment.astimezone(UTC)
        except OverflowError:
            message = _("Enter a date and time between the years 1 and 9999.")
            raise forms.ValidationError(message, code="invalid") from None


class MomentFilter(django_filters.DateTimeFilter):
    field_class = UtcDateTimeField


def moment_filter(field_name: str, lookup: str, label) -> MomentFilter:
    """`since` / `until` style filters of the pages and the API (a date-time input on the pages)."""
    return MomentFilter(
        field_name=field_name,
        lookup_expr=lookup,
        label=label,
        widget=forms.DateTimeInput(attrs={"type": "datetime-local"}),
    )
