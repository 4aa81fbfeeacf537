"""The OpenAPI schema documents the error answers too, in the one shape panel/core/exceptions.py gives them,
so a client generated from /api/schema/ knows every status code the panel can send back."""

from django.utils.translation import gettext_lazy as _
from drf_spectacular.openapi import AutoSchema
from drf_spectacular.utils import OpenApiParameter, extend_schema_field
from rest_framework import permissions, serializers


@extend_schema_field(
    {
        "type": "object",
        "description": "Problems by field name (non_field_errors: the request as a whole).",
        "additionalProperties": {
            # A list of sentences; for a field that holds a list or a map, the same keyed by index or key.
            "oneOf": [{"type": "array", "items": {"type": "string"}}, {"type": "object"}],
        },
    }
)
class FieldErrorsField(serializers.DictField):
    pass


class ErrorSerializer(serializers.Serializer):
    detail = serializers.CharField(help_text="One sentence: what failed and how to fix it.")
    errors = FieldErrorsField(required=False, help_text="Validation errors only.")


ERROR_DESCRIPTIONS = {
    "400": _("The request is invalid; `errors` names each field at fault."),
    "401": _("Not authenticated: send `Authorization: Bearer <API token>`."),
    "403": _("Your role may not do this."),
    "404": _("No such object, or you may not see it."),
}


class PanelAutoSchema(AutoSchema):
    def get_override_parameters(self):
        """The view's `extra_query_params` for this action (wait, timeout, watch: panel/core/streams.py)."""
        parameters = list(super().get_override_parameters())
        action = getattr(self.view, "action", None) or self.method.lower()
        for name, about in getattr(self.view, "extra_query_params", {}).get(action, {}).items():
            if not isinstance(about, OpenApiParameter):
                about = OpenApiParameter(name, str, description=about)
            parameters.append(about)
        return parameters

    def get_operation(self, path, path_regex, path_prefix, method, registry):
        from panel.core.streams import document_stream_responses

        operation = super().get_operation(path, path_regex, path_prefix, method, registry)
        if operation is None:
            return None
        document_stream_responses(self, operation)
        error_ref = self.resolve_serializer(ErrorSerializer, "response").ref
        for code in self._error_codes(operation):
            operation["responses"].setdefault(
                code,
                {
                    "description": str(ERROR_DESCRIPTIONS[code]),
                    "content": {"application/json": {"schema": error_ref}},
                },
            )
        return operation

    def _error_codes(self, operation) -> list[str]:
        codes = []
        takes_input = "requestBody" in operation or any(
            parameter["in"] == "query" for parameter in operation.get("parameters", [])
        )
        if takes_input or self.method in ("POST", "PUT", "PATCH"):
            codes.append("400")
        if not all(issubclass(p, permissions.AllowAny) for p in self.view.permission_classes):
            codes += ["401", "403"]
        if "{" in self.path:
            codes.append("404")
        return codes
