"""Filters shared by the apps' FilterSets."""

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
