"""The API accepts exactly what /api/schema/ documents: a query parameter or a body field the schema does not
list for the operation is refused with 400 naming it, at any depth of the body.

The schema is the one source of truth because it already knows every operation's parameters (the
filterset's fields, pagination, the parameters and query serializers given to @extend_schema, and a view's
`extra_query_params`) and its request body (serializers, nested ones and lists of them included). What a
client generated from the schema may send is then exactly what the panel takes, and a parameter nobody
documented cannot quietly do something (or quietly do nothing, as `?name=does-not-exist` once listed every
node).

The document is built once per process, on the first API request (about two seconds), and kept.
"""

import re
import threading
from collections.abc import Mapping

from django.utils.translation import gettext as _
from django.utils.translation import ngettext
from rest_framework.settings import api_settings

from panel.core.rest.exceptions import InputError
from panel.core.rest.safe_input import clip

# DRF's content-type override: every endpoint takes it (`?format=json`), the schema lists it nowhere.
ALWAYS_ALLOWED = frozenset({"format"})
# Bodies whose values carry their own JSON types; a form's or a multipart upload's are all strings.
TYPED_MEDIA = frozenset({"application/json", "application/yaml", "application/x-yaml", "text/yaml"})
SCALARS = frozenset({"integer", "number", "string", "boolean"})
JSON_TYPES: dict[str, type | tuple[type, ...]] = {
    "integer": int,
    "number": (int, float),
    "string": str,
    "boolean": bool,
    "array": list,
    "object": Mapping,
}

_lock = threading.Lock()
_routes: list[tuple[re.Pattern, dict]] | None = None
_components: dict = {}


def _load() -> list[tuple[re.Pattern, dict]]:
    """(path regex, path item) for every documented path, the most literal first: /deployments/plan/ must
    win over /deployments/{id}/, as in every OpenAPI router."""
    global _routes, _components
    with _lock:
        if _routes is None:
            from drf_spectacular.generators import SchemaGenerator

            document = SchemaGenerator().get_schema(request=None, public=True)
            _components = document.get("components", {}).get("schemas", {})
            routes = []
            for path, item in document["paths"].items():
                pattern = re.sub(r"\\\{[^/]+?\\\}", "[^/]+", re.escape(path))
                routes.append((path.count("{"), re.compile(f"^{pattern}$"), item))
            routes.sort(key=lambda route: route[0])
            _routes = [(regex, item) for _n, regex, item in routes]
    return _routes


def operation_for(path: str, method: str) -> dict | None:
    """The schema's operation for this request, or None when the schema has none (OPTIONS, a method the
    view refuses with 405, a view the schema leaves out)."""
    method = "get" if method.upper() == "HEAD" else method.lower()
    for regex, item in _load():
        if regex.match(path):
            return item.get(method)
    return None


def check_request(request) -> None:
    """Raise InputError (400) naming every query parameter and body field the operation does not take.
    `request` is DRF's; a plain Django view (an async one) may pass its HttpRequest: then only the query is
    checked, its body being its own to read."""
    operation = operation_for(request.path_info, request.method)
    if operation is None:
        return
    _check_query(request, operation)
    _check_body(request, operation)


def _check_query(request, operation: dict) -> None:
    allowed = {p["name"] for p in operation.get("parameters", []) if p["in"] == "query"} | ALWAYS_ALLOWED
    unknown = [name for name in request.GET if name not in allowed]
    if not unknown:
        return
    takes = ", ".join(sorted(allowed - ALWAYS_ALLOWED))
    if takes:
        message = _("Unknown query parameter; this endpoint takes: {names}.").format(names=takes)
    else:
        message = _("Unknown query parameter; this endpoint takes none.")
    summary = ngettext(
        "Unknown query parameter: {names}.", "Unknown query parameters: {names}.", len(unknown)
    ).format(names=", ".join(unknown))
    raise InputError(summary, {name: [message] for name in unknown})


def _check_body(request, operation: dict) -> None:
    data = getattr(request, "data", None)
    if not data:  # no body, `{}`, an empty form
        return
    body = operation.get("requestBody")
    if body is None:
        message = _("This endpoint takes no request body.")
        if not isinstance(data, Mapping):
            raise InputError(message, {"non_field_errors": [message]})
        unknown, message = (
            [str(key) for key in data],
            _("Unknown field; this endpoint takes no request body."),
        )
    else:
        content = body.get("content", {})
        media_type = request.content_type.split(";")[0].strip()
        media: dict = content.get(media_type) or next(iter(content.values()), {})
        unknown, message = unknown_fields(data, media.get("schema", {})), _("Unknown field.")
        if not unknown and media_type in TYPED_MEDIA:
            _check_types(data, media.get("schema", {}))
    if unknown:
        summary = ngettext("Unknown field: {names}.", "Unknown fields: {names}.", len(unknown)).format(
            names=", ".join(clip(name) for name in unknown)
        )
        raise InputError(summary, {clip(path, 200): [message] for path in unknown})


def _check_types(data, schema: dict) -> None:
    wrong = wrong_types(data, schema)
    if wrong:
        summary = ngettext("Wrong type: {names}.", "Wrong types: {names}.", len(wrong)).format(
            names=", ".join(wrong)
        )
        raise InputError(summary, {path: [_type_message(expected)] for path, expected in wrong.items()})


def _type_message(expected: str) -> str:
    return {
        "integer": _("Give a whole number, not a string."),
        "number": _("Give a number, not a string."),
        "boolean": _("Give true or false, not a string."),
        "string": _("Give a string."),
    }[expected]


def wrong_types(value, schema: dict, path: str = "") -> dict[str, str]:
    """{flat path: the JSON type the schema wants} for each scalar of another JSON type: `"replicas": "2"`
    is refused rather than read as 2 (DRF's fields coerce strings, as a form would need). Left to the
    serializers, whose messages say more: null (they know `allow_null`), a list for an object or the other
    way round, the values of a free-form map (`labels` says how to quote one), and a value whose schema
    allows several types."""
    expected = _json_type(schema)
    if value is None:
        return {}
    if expected in SCALARS and not _is_json_type(value, expected):
        return {path or api_settings.NON_FIELD_ERRORS_KEY: expected}
    wrong: dict[str, str] = {}
    if isinstance(value, Mapping):
        properties, _closed, _extra = _object_shape(schema)
        for key, item in value.items():
            if key in properties:
                wrong.update(wrong_types(item, properties[key], f"{path}.{key}" if path else str(key)))
    elif isinstance(value, list):
        items = _items(schema)
        if items:
            for index, item in enumerate(value):
                wrong.update(wrong_types(item, items, f"{path}[{index}]"))
    return wrong


def _json_type(schema: dict) -> str | None:
    kinds: set[str] = set()
    for part in _alternatives(schema):
        kind = part.get("type")
        if isinstance(kind, list):
            kinds.update(k for k in kind if k != "null")
        elif kind:
            kinds.add(kind)
    kinds &= set(JSON_TYPES)
    return kinds.pop() if len(kinds) == 1 else None


def _is_json_type(value, expected: str) -> bool:
    if isinstance(value, bool):
        return expected == "boolean"
    if expected == "integer":
        return isinstance(value, int) or (isinstance(value, float) and value.is_integer())
    return isinstance(value, JSON_TYPES[expected])


def unknown_fields(value, schema: dict, path: str = "") -> list[str]:
    """Flat paths (`nodes[0].npu`) of the keys in `value` that `schema` does not declare. Only objects the
    schema closes (`additionalProperties: false`, as panel.core.rest.schema marks every request body) are
    checked; free-form objects (a DictField, `extra_flags`) take any key."""
    if isinstance(value, Mapping):
        properties, closed, extra = _object_shape(schema)
        unknown = []
        for key in value:
            where = f"{path}.{key}" if path else str(key)
            if key in properties:
                unknown += unknown_fields(value[key], properties[key], where)
            elif closed:
                unknown.append(where)
            elif extra:
                unknown += unknown_fields(value[key], extra, where)
        return unknown
    if isinstance(value, list):
        items = _items(schema)
        if not items:
            return []
        found = []
        for index, item in enumerate(value):
            found += unknown_fields(item, items, f"{path}[{index}]")
        return found
    return []


def _resolve(schema: dict) -> dict:
    while isinstance(schema, dict) and "$ref" in schema:
        schema = _components.get(schema["$ref"].rsplit("/", 1)[-1], {})
    return schema if isinstance(schema, dict) else {}


def _alternatives(schema: dict) -> list[dict]:
    """The schema and the parts it is built of (allOf for a nullable nested serializer, oneOf/anyOf)."""
    schema = _resolve(schema)
    parts = [schema]
    for keyword in ("allOf", "oneOf", "anyOf"):
        for part in schema.get(keyword, []):
            parts += _alternatives(part)
    return parts


def _object_shape(schema: dict) -> tuple[dict, bool, dict | None]:
    """(declared properties, whether other keys are refused, the schema of other keys' values)."""
    objects = [part for part in _alternatives(schema) if {"properties", "additionalProperties"} & set(part)]
    properties: dict[str, dict] = {}
    for part in objects:
        for name, sub in part.get("properties", {}).items():
            # A field the alternatives type differently (a plan body's `model`: an id in the wizard's
            # request, a name in a spec) may be either; one alternative must not overrule the other.
            known = properties.get(name)
            properties[name] = sub if known is None or known == sub else {"anyOf": [known, sub]}
    others = [part.get("additionalProperties") for part in objects]
    closed = bool(objects) and all(other is False for other in others)
    extra = next((other for other in others if isinstance(other, dict)), None)
    return properties, closed, extra


def _items(schema: dict) -> dict | None:
    return next((part["items"] for part in _alternatives(schema) if "items" in part), None)
