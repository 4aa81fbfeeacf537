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

from panel.core.exceptions import InputError

# DRF's content-type override: every endpoint takes it (`?format=json`), the schema lists it nowhere.
ALWAYS_ALLOWED = frozenset({"format"})

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
        media = content.get(request.content_type.split(";")[0].strip()) or next(iter(content.values()), {})
        unknown, message = unknown_fields(data, media.get("schema", {})), _("Unknown field.")
    if unknown:
        summary = ngettext("Unknown field: {names}.", "Unknown fields: {names}.", len(unknown)).format(
            names=", ".join(unknown)
        )
        raise InputError(summary, {path: [message] for path in unknown})


def unknown_fields(value, schema: dict, path: str = "") -> list[str]:
    """Flat paths (`nodes[0].npu`) of the keys in `value` that `schema` does not declare. Only objects the
    schema closes (`additionalProperties: false`, as panel.core.schema marks every request body) are
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
    properties = {name: sub for part in objects for name, sub in part.get("properties", {}).items()}
    others = [part.get("additionalProperties") for part in objects]
    closed = bool(objects) and all(other is False for other in others)
    extra = next((other for other in others if isinstance(other, dict)), None)
    return properties, closed, extra


def _items(schema: dict) -> dict | None:
    return next((part["items"] for part in _alternatives(schema) if "items" in part), None)
