"""The OpenAPI schema documents the error answers too, in the one shape panel/core/rest/exceptions.py gives
them, so a client generated from /api/schema/ knows every status code the panel can send back. It is also the
contract panel.core.rest.strict enforces: request bodies are closed (additionalProperties: false) and the
query parameters listed are the only ones taken."""

from django.utils.translation import gettext_lazy as _
from drf_spectacular.openapi import AutoSchema
from drf_spectacular.plumbing import get_view_model
from drf_spectacular.utils import OpenApiParameter, extend_schema_field
from rest_framework import permissions, serializers
from rest_framework.schemas.utils import get_pk_description

from panel.core.rest.api import name_field_of
from panel.core.rest.idempotency import HEADER, MAX_KEY_LENGTH, REPLAY_HEADER
from panel.core.rest.streams import WATCH_ACTIONS, document_stream_responses


@extend_schema_field(
    {
        "type": "object",
        "description": "Problems by flat field path (`nodes[0].npus`; non_field_errors: the request as a "
        "whole), each a list of sentences.",
        "additionalProperties": {"type": "array", "items": {"type": "string"}},
    }
)
class FieldErrorsField(serializers.DictField):
    pass


class ErrorSerializer(serializers.Serializer):
    detail = serializers.CharField(help_text="One sentence: what failed and how to fix it.")
    errors = FieldErrorsField(required=False, help_text="Validation errors only.")


ERROR_DESCRIPTIONS = {
    "400": _("The request is invalid; `errors` names each field or query parameter at fault."),
    "401": _("Not authenticated: send `Authorization: Bearer <API token>`."),
    "403": _("Your role may not do this."),
    "404": _("No such object, or you may not see it."),
    "406": _("An event stream (Accept: text/event-stream, format=event-stream) answers watch=true only."),
    "413": _("The request body is larger than the panel takes."),
    "415": _("The request body is of a type this endpoint does not read (send JSON)."),
    "429": _("Too many requests: wait the seconds Retry-After gives, then send it again."),
}
RETRY_AFTER_HEADER = {
    "Retry-After": {
        "schema": {"type": "integer", "minimum": 0},
        "description": "Seconds to wait before the next request.",
    }
}
IDEMPOTENCY_ANSWERS = {
    "409": _("A request with this Idempotency-Key is still being processed; retry later."),
    "422": _("This Idempotency-Key was used with another request body or other query parameters."),
    "503": _("Redis, where Idempotency-Keys are kept, is unreachable; nothing was done."),
}
IDEMPOTENCY_PARAMETERS = [
    OpenApiParameter(
        HEADER,
        {"type": "string", "minLength": 1, "maxLength": MAX_KEY_LENGTH},
        location=OpenApiParameter.HEADER,
        description="Any unique string, e.g. a UUID. A retry with the same key (same user, path, body and "
        "query) gets the first answer again instead of running twice, for 24 hours; unless what that "
        "answer created was deleted since, then the request runs anew. The same key with another body: 422.",
    ),
    OpenApiParameter(
        REPLAY_HEADER,
        {"type": "string", "enum": ["true"]},
        location=OpenApiParameter.HEADER,
        response=True,
        description="Set when this answer is the stored answer to an earlier request with the same "
        "Idempotency-Key.",
    ),
]


class PanelAutoSchema(AutoSchema):
    def get_operation(self, path, path_regex, path_prefix, method, registry):
        operation = super().get_operation(path, path_regex, path_prefix, method, registry)
        if operation is None:
            return None
        document_stream_responses(self, operation)
        error_ref = self.resolve_serializer(ErrorSerializer, "response").ref
        descriptions = {**ERROR_DESCRIPTIONS, **(IDEMPOTENCY_ANSWERS if self._idempotent() else {})}
        for code in self._error_codes(operation):
            answer = {
                "description": str(descriptions[code]),
                "content": {"application/json": {"schema": error_ref}},
            }
            documented = operation["responses"].setdefault(code, answer)
            if not documented.get("description"):  # a view's own @extend_schema(responses={429: …})
                documented["description"] = answer["description"]
            if code == "429":  # not required: django-axes' sign-in lockout answers 429 without it
                documented.setdefault("headers", {}).update(RETRY_AFTER_HEADER)
        return operation

    def _map_serializer_field(self, field, direction, bypass_extensions=False):
        """drf-spectacular's mapping, plus the bounds of a list that DRF checks outside the field's validators
        (`allow_empty=False`, a nested serializer's `many=True, min_length=…, max_length=…`): the schema
        states every rule the panel refuses a body by."""
        schema = super()._map_serializer_field(field, direction, bypass_extensions)
        if direction == "request" and isinstance(schema, dict) and schema.get("type") == "array":
            least = (
                getattr(field, "min_length", None) if isinstance(field, serializers.ListSerializer) else None
            )
            if getattr(field, "allow_empty", True) is False:
                least = max(least or 0, 1)
            if least is not None:
                schema["minItems"] = max(schema.get("minItems", 0), least)
            most = (
                getattr(field, "max_length", None) if isinstance(field, serializers.ListSerializer) else None
            )
            if most is not None:
                schema["maxItems"] = min(schema.get("maxItems", most), most)
        return schema

    def _insert_field_validators(self, field, schema):
        """drf-spectacular's, but the default of a field that may be blank stays beside its `oneOf`
        (pattern | blank): inside the pattern's branch a default "" failed its own pattern, and
        openapi-spec-validator refused the whole schema for it."""
        super()._insert_field_validators(field, schema)
        for branch in schema.get("oneOf", []):
            if "default" in branch:
                schema["default"] = branch.pop("default")

    def get_override_parameters(self):
        """The view's `extra_query_params` for this action (panel.core.rest.api), and the Idempotency-Key
        headers where the view method honours them."""
        parameters = list(super().get_override_parameters())
        extra = getattr(self.view, "extra_query_params", {}).get(self._action(), {})
        for name, about in extra.items():
            if not isinstance(about, OpenApiParameter):
                about = OpenApiParameter(name, str, description=about)
            parameters.append(about)
        if self._idempotent():
            parameters += IDEMPOTENCY_PARAMETERS
        return parameters

    def _resolve_path_parameters(self, variables):
        """The lookup of panel.core.rest.api.NameLookupMixin: "id or name" as a string where the resource has
        a name, else the type of its primary key (the lookup's regex is no longer DRF's, which the generator
        reads the type from)."""
        parameters = super()._resolve_path_parameters(variables)
        model = get_view_model(self.view, emit_warnings=False)
        if model is None or not hasattr(self.view, "lookup_name_field"):
            return parameters
        name_field = name_field_of(model, self.view.lookup_name_field)
        lookup = {"id", "pk", self.view.lookup_url_kwarg or self.view.lookup_field}
        for parameter in parameters:
            if parameter["name"] not in lookup:
                continue
            if name_field:
                parameter["schema"] = {"type": "string", "pattern": r"^[^/]+$"}
                parameter["description"] = (
                    f"The id or the {name_field} of the {model._meta.verbose_name}: digits only are an id, "
                    f"anything else a {name_field}."
                )
            else:
                parameter["schema"] = self._map_model_field(model._meta.pk, direction=None)
                parameter["description"] = get_pk_description(model, model._meta.pk)
        return parameters

    def _action(self) -> str:
        return getattr(self.view, "action", None) or self.method.lower()

    def _idempotent(self) -> bool:
        handler = getattr(self.view, self._action(), None)
        return bool(getattr(handler, "idempotent", False))

    def _error_codes(self, operation) -> list[str]:
        codes = [
            "400"
        ]  # every operation refuses query parameters it does not document (panel.core.rest.strict)
        if not all(issubclass(p, permissions.AllowAny) for p in self.view.permission_classes):
            codes += ["401", "403"]
        if "{" in self.path:
            codes.append("404")
        if "requestBody" in operation:
            codes += ["413", "415"]
        if self._idempotent():
            codes += list(IDEMPOTENCY_ANSWERS)
        if getattr(self.view, "watch", None) is not None and self._action() in WATCH_ACTIONS:
            codes.append("406")  # panel.core.rest.streams: an event stream without watch=true
        if getattr(self.view, "throttle_classes", None):  # panel.core.rest.throttling; anonymous callers too
            codes.append("429")
        return codes


def _parts(schema: dict) -> list:
    """The schemas `schema` is made of: its properties, alternatives, items and other keys' values."""
    parts = [*schema.get("properties", {}).values(), schema.get("items")]
    for keyword in ("allOf", "oneOf", "anyOf"):
        parts += schema.get(keyword, [])
    if isinstance(schema.get("additionalProperties"), dict):
        parts.append(schema["additionalProperties"])
    return parts


def close_request_bodies(result, generator, request, public):
    """Postprocessing hook: every object a request body is made of takes its declared properties only
    (additionalProperties: false), which is what panel.core.rest.strict enforces. Free-form objects (a
    DictField, `extra_flags`) declare additionalProperties themselves and stay open."""
    components = result.get("components", {}).get("schemas", {})
    seen = set()

    def close(schema):
        if not isinstance(schema, dict):
            return
        ref = schema.get("$ref")
        if ref:
            name = ref.rsplit("/", 1)[-1]
            if name not in seen:
                seen.add(name)
                close(components.get(name))
            return
        if "properties" in schema and "additionalProperties" not in schema:
            schema["additionalProperties"] = False
        for sub in _parts(schema):
            close(sub)

    for item in result.get("paths", {}).values():
        for operation in item.values():
            for media in operation.get("requestBody", {}).get("content", {}).values():
                close(media.get("schema"))
    return result
