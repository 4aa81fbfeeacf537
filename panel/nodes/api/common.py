"""What the node API's viewset and the mixins it is made of share: the 409 answer, a Django validation
error as the API's, and the panel's address as the request reached it. Here, not in views, so a mixin can
use them without importing the viewset that mixes it in."""

from django.core.exceptions import ValidationError as DjangoValidationError
from rest_framework import serializers, status
from rest_framework.exceptions import APIException


class Conflict(APIException):
    status_code = status.HTTP_409_CONFLICT
    default_code = "conflict"


def validation_error(error: DjangoValidationError) -> serializers.ValidationError:
    return serializers.ValidationError(serializers.as_serializer_error(error))


def panel_url(request) -> str:
    return request.build_absolute_uri("/").rstrip("/")
