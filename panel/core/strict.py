"""Request bodies refuse keys they do not know: a misspelt key must not be dropped silently."""

from typing import Any

from django.utils.translation import gettext as _
from rest_framework import serializers


def refuse_unknown_keys(serializer: serializers.Serializer, data: Any) -> None:
    """A misspelt key must not be dropped silently: `tensor_parallel: 4` would deploy with TP chosen by the
    planner and the pipeline would never know."""
    if not isinstance(data, dict):
        return
    unknown = sorted(set(data) - set(serializer.fields))
    if unknown:
        raise serializers.ValidationError({key: [_("Unknown field.")] for key in unknown})


class StrictSerializer(serializers.Serializer):
    def to_internal_value(self, data):
        refuse_unknown_keys(self, data)
        return super().to_internal_value(data)
