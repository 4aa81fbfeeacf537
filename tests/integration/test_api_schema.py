"""/api/schema/ tells the truth: every route under /api/v1/ with the methods it takes and no other, error
answers (429 included), the strict rules (bounds, required fields, closed bodies), how to authenticate, and
id types; it and /api/docs/ are for signed-in users and API tokens only, like the rest of the API."""

import re

import pytest
import yaml
from django.test import Client
from django.urls import URLResolver, get_resolver
from django.utils import timezone
from openapi_spec_validator import OpenAPIV30SpecValidator
from rest_framework.test import APIClient

from panel.accounts.models import ApiToken
from tests.conftest import api_client_for

pytestmark = pytest.mark.django_db


def test_an_anonymous_client_gets_neither_the_schema_nor_the_docs_page():
    client = APIClient()
    schema = client.get("/api/schema/")
    assert schema.status_code == 401
    assert schema["WWW-Authenticate"] == "Bearer"
    assert "/api/v1/nodes/" not in schema.content.decode()
    docs = client.get("/api/docs/")
    assert docs.status_code == 302
    assert docs["Location"] == "/accounts/login/?next=/api/docs/"


def test_an_api_token_reads_the_schema_and_a_revoked_one_does_not(charlie):
    token, raw = ApiToken.issue(charlie, "schema")
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    assert "/api/v1/nodes/" in yaml.safe_load(client.get("/api/schema/").content)["paths"]
    ApiToken.objects.filter(pk=token.pk).update(revoked=timezone.now())
    assert client.get("/api/schema/").status_code == 401


def test_a_signed_in_viewer_opens_the_docs_page(charlie):
    client = Client()
    client.force_login(charlie)
    response = client.get("/api/docs/")
    assert response.status_code == 200
    assert b"swagger-ui" in response.content


def test_every_operation_documents_its_error_answers_in_the_error_shape(openapi):
    error = {"$ref": "#/components/schemas/Error"}
    for path, operations in openapi["paths"].items():
        for method, operation in operations.items():
            responses = operation["responses"]
            assert responses["401"]["content"]["application/json"]["schema"] == error, (method, path)
            assert "403" in responses, (method, path)
            if "{" in path:
                assert "404" in responses, (method, path)
            if method in ("post", "put", "patch"):
                assert "400" in responses, (method, path)
    assert set(openapi["components"]["schemas"]["Error"]["required"]) == {"detail"}


def test_list_operations_document_400_for_bad_pagination_or_filters(openapi):
    assert "400" in openapi["paths"]["/api/v1/nodes/"]["get"]["responses"]
    assert "400" in openapi["paths"]["/api/v1/operations/"]["get"]["responses"]


def test_the_schema_says_how_to_send_an_api_token(openapi):
    scheme = openapi["components"]["securitySchemes"]["apiToken"]
    assert scheme == {"type": "http", "scheme": "bearer", "description": scheme["description"]}
    assert {"apiToken": []} in openapi["paths"]["/api/v1/nodes/"]["get"]["security"]


def _lookup(openapi, path):
    parameters = openapi["paths"][path]["get"]["parameters"]
    return next(p for p in parameters if p["in"] == "path")


@pytest.mark.parametrize(
    "path",
    [
        "/api/v1/tokens/{id}/",
        "/api/v1/nodes/{id}/",
        "/api/v1/models/{id}/",
        "/api/v1/deployments/{id}/",
        "/api/v1/packages/{id}/",
        "/api/v1/node-stacks/{name}/",
    ],
)
def test_resources_with_a_name_document_their_lookup_as_id_or_name(openapi, path):
    lookup = _lookup(openapi, path)
    assert lookup["schema"]["type"] == "string"
    assert "id or the name" in lookup["description"]


@pytest.mark.parametrize(
    ("path", "format_"),
    [
        ("/api/v1/alerts/{id}/", None),
        ("/api/v1/audit/{id}/", None),
        ("/api/v1/benchmarks/{id}/", None),
        ("/api/v1/model-artifacts/{id}/", None),
        ("/api/v1/operations/{id}/", "uuid"),
    ],
)
def test_resources_without_a_name_document_their_id_type(openapi, path, format_):
    schema = _lookup(openapi, path)["schema"]
    assert schema["type"] == ("string" if format_ else "integer")
    assert schema.get("format") == format_


# ---- every route, and nothing else -----------------------------------------------------------------------

HTTP_METHODS = ("get", "post", "put", "patch", "delete")


def _openapi_path(route: str) -> str:
    """A URL conf route (a path() route, or a router's regex) as OpenAPI writes it: `<str:pk>` and
    `(?P<pk>[^/]+)` as `{id}` (drf-spectacular's name for a primary key), other parameters by name."""
    path = re.sub(r"\(\?P<(\w+)>[^)]*\)", r"{\1}", route)
    path = re.sub(r"<(?:\w+:)?(\w+)>", r"{\1}", path)
    path = path.replace("^", "").replace("$", "").replace("\\", "")
    return "/" + path.replace("{pk}", "{id}")


def _methods_of(callback) -> set[str]:
    """The methods a view answers (not with 405): a viewset's bound actions, a view class's handlers."""
    view_class = getattr(callback, "cls", None) or getattr(callback, "view_class", None)
    assert view_class is not None, (
        f"{callback.__module__}.{callback.__name__} is a plain function view: make it a View class, so its "
        "methods can be known and documented"
    )
    allowed = set(view_class.http_method_names) & set(HTTP_METHODS)
    actions = getattr(callback, "actions", None)
    if actions is not None:
        return set(actions) & allowed
    return {method for method in allowed if hasattr(view_class, method)}


def api_v1_routes() -> dict[str, tuple[set[str], object]]:
    """Every route the URL conf has under /api/v1/: its OpenAPI path -> (methods, callback)."""
    routes = {}

    def walk(patterns, prefix):
        for pattern in patterns:
            if isinstance(pattern, URLResolver):
                walk(pattern.url_patterns, prefix + str(pattern.pattern))
                continue
            path = _openapi_path(prefix + str(pattern.pattern))
            if path.startswith("/api/v1/"):
                assert path not in routes, f"two routes for {path}"
                routes[path] = (_methods_of(pattern.callback), pattern.callback)

    walk(get_resolver().url_patterns, "")
    return routes


def test_the_schema_lists_every_api_v1_route_with_its_methods_and_nothing_else(openapi):
    routes = {path: methods for path, (methods, _callback) in api_v1_routes().items()}
    documented = {
        path: {method for method in item if method in HTTP_METHODS}
        for path, item in openapi["paths"].items()
        if path.startswith("/api/v1/")
    }
    assert "/api/v1/deployments/{id}/chat/" in routes  # the walk sees plain views and hand-made routes
    assert "/api/v1/deployments/{id}/logs.txt" in routes
    missing = {path: sorted(routes[path]) for path in routes.keys() - documented.keys()}
    bogus = sorted(documented.keys() - routes.keys())
    wrong = {
        path: {"served": sorted(routes[path]), "documented": sorted(documented[path])}
        for path in routes.keys() & documented.keys()
        if routes[path] != documented[path]
    }
    assert (missing, bogus, wrong) == ({}, [], {})


def test_every_method_a_route_leaves_out_is_a_405(alice):
    """The other half of "the right methods": what the walk says a route does not take, it refuses."""
    client = api_client_for(alice)
    served_anyway = []
    for path, (methods, _callback) in api_v1_routes().items():
        url = re.sub(r"\{\w+\}", "0", path)
        for method in set(HTTP_METHODS) - methods:
            response = getattr(client, method)(url)
            if response.status_code != 405:
                served_anyway.append((method, path, response.status_code))
    assert served_anyway == []


def test_the_playground_is_documented_as_the_view_serves_it(openapi):
    item = openapi["paths"]["/api/v1/deployments/{id}/chat/"]
    assert set(item) == {"post"}
    operation = item["post"]
    body = operation["requestBody"]["content"]["application/json"]["schema"]
    assert body["required"] == ["messages"]
    assert body["additionalProperties"] is True  # OpenAI's fields go to the engine unchanged
    assert {"400", "401", "403", "404", "409", "413", "502"} <= set(operation["responses"])
    assert "429" not in operation["responses"]  # DRF's throttles do not run in a plain view
    assert not [p for p in operation["parameters"] if p["in"] == "query"]


def test_the_playground_refuses_a_query_parameter_its_schema_does_not_list(bob):
    from panel.catalog.models import Model
    from panel.deployments.models import Deployment

    model = Model.objects.create(name="chat-model")
    Deployment.objects.create(name="chatty", model=model, spec={"parts": []})
    _token, raw = ApiToken.issue(bob, "chat")
    response = APIClient().post(
        "/api/v1/deployments/chatty/chat/?temperature=2",
        {"messages": []},
        format="json",
        HTTP_AUTHORIZATION=f"Bearer {raw}",
    )
    assert response.status_code == 400, response.content
    assert list(response.json()["errors"]) == ["temperature"]
    get = APIClient().get("/api/v1/deployments/chatty/chat/", HTTP_AUTHORIZATION=f"Bearer {raw}")
    assert (get.status_code, get["Allow"]) == (405, "POST, OPTIONS")


def test_the_api_root_is_documented(openapi):
    root = openapi["paths"]["/api/v1/"]
    assert set(root) == {"get"}
    schema = root["get"]["responses"]["200"]["content"]["application/json"]["schema"]
    assert schema["additionalProperties"] == {"type": "string", "format": "uri"}


# ---- the strict rules are in the schema ------------------------------------------------------------------


def test_every_throttled_operation_documents_429_with_retry_after(openapi):
    for path, item in openapi["paths"].items():
        if path == "/api/v1/deployments/{id}/chat/":
            continue
        for method, operation in item.items():
            answer = operation["responses"].get("429")
            assert answer is not None, (method, path)
            assert answer["content"]["application/json"]["schema"] == {"$ref": "#/components/schemas/Error"}
            assert answer.get("headers", {}).get("Retry-After"), (method, path)


def test_a_throttled_request_gets_the_documented_429(charlie, settings):
    settings.PANEL_API_THROTTLE_USER = "2/min"
    client = api_client_for(charlie)
    answers = [client.get("/api/v1/nodes/") for _ in range(3)]
    assert [answer.status_code for answer in answers] == [200, 200, 429]
    assert int(answers[-1]["Retry-After"]) > 0
    assert set(answers[-1].json()) == {"detail"}


def _parts(schema: dict) -> list[dict]:
    parts = [schema]
    for keyword in ("allOf", "oneOf", "anyOf"):
        for part in schema.get(keyword, []):
            parts += _parts(part)
    return parts


def _constraint(schema: dict, key: str):
    return next((part[key] for part in _parts(schema) if key in part), None)


def _field_problems(name: str, field, prop: dict, required: set[str]) -> list[str]:
    """How the schema of one request field falls short of what the field refuses."""
    from rest_framework import serializers

    problems = []
    if field.required != (name in required):
        problems.append(f"required is {field.required}")
    rules = []
    if isinstance(field, (serializers.IntegerField, serializers.FloatField, serializers.DecimalField)):
        rules = [("min_value", "minimum"), ("max_value", "maximum")]
    elif isinstance(field, serializers.CharField):
        rules = [("min_length", "minLength"), ("max_length", "maxLength")]
        if not field.allow_blank and not (_constraint(prop, "minLength") or _constraint(prop, "enum")):
            problems.append("blank refused, no minLength")
    elif isinstance(field, (serializers.ListField, serializers.ListSerializer)):
        rules = [("min_length", "minItems"), ("max_length", "maxItems")]
        if not field.allow_empty and not _constraint(prop, "minItems"):
            problems.append("empty list refused, no minItems")
    for attribute, keyword in rules:
        limit = getattr(field, attribute, None)
        if limit is not None and _constraint(prop, keyword) != limit:
            problems.append(f"{attribute}={limit} but {keyword}={_constraint(prop, keyword)}")
    custom = type(field).__module__.startswith("panel.") and not isinstance(field, serializers.CharField)
    if custom and prop.get("type") == "string" and "oneOf" not in prop:  # drf-spectacular's fallback
        problems.append(f"{type(field).__name__} documented as a bare string")
    return problems


def test_every_request_body_states_the_rules_its_serializer_refuses_by():
    """Required fields, minimums and maximums, lengths, non-empty lists, closed objects: for every
    serializer a request body is made of, field by field."""
    import inspect

    from drf_spectacular.generators import SchemaGenerator
    from rest_framework import serializers

    generator = SchemaGenerator()
    document = generator.get_schema(request=None, public=True)
    components = document["components"]["schemas"]
    problems, checked = [], 0
    for (name, kind), component in generator.registry._components.items():
        serializer = component.object() if inspect.isclass(component.object) else component.object
        if kind != "schemas" or not name.endswith("Request") or name not in components:
            continue
        if not isinstance(serializer, serializers.Serializer):
            continue
        schema = components[name]
        if "oneOf" in schema:  # a PolymorphicProxySerializer: each of its bodies is checked as a component
            continue
        if schema.get("additionalProperties") is not False:
            problems.append(f"{name}: not closed")
        required = set(schema.get("required", []))
        partial = name.startswith("Patched")  # PATCH: every field may be left out
        for field_name, field in serializer.fields.items():
            if field.read_only:
                continue
            prop = schema["properties"].get(field_name)
            if prop is None:
                problems.append(f"{name}.{field_name}: missing")
                continue
            checked += 1
            found = _field_problems(field_name, field, prop, required)
            if partial:
                found = [problem for problem in found if not problem.startswith("required")]
            problems += [f"{name}.{field_name}: {problem}" for problem in found]
    assert checked > 100
    assert problems == []


def test_query_parameters_state_their_bounds(openapi):
    def parameter(path, method, name):
        parameters = openapi["paths"][path][method]["parameters"]
        return next(p for p in parameters if p["name"] == name and p["in"] == "query")["schema"]

    assert parameter("/api/v1/nodes/", "get", "page") == {
        "oneOf": [{"type": "integer", "minimum": 1}, {"type": "string", "enum": ["last"]}]
    }
    assert parameter("/api/v1/nodes/", "get", "page_size") == {"type": "integer", "minimum": 1, "default": 50}
    assert parameter("/api/v1/deployments/", "post", "timeout") == {
        "type": "number",
        "minimum": 0,
        "maximum": 3600,
        "default": 300,
    }
    assert parameter("/api/v1/nodes/{id}/metrics/", "get", "step")["minimum"] == 1
    assert parameter("/api/v1/deployments/{id}/logs/", "get", "limit")["minimum"] == 1


def test_placement_npus_and_names_are_documented_as_the_panel_reads_them(openapi):
    components = openapi["components"]["schemas"]
    npus = components["PlacementRequest"]["properties"]["npus"]
    assert [part.get("type") for part in npus["oneOf"]] == ["integer", "string", "array"]
    name = components["DeploymentSpecRequest"]["properties"]["name"]
    assert (name["maxLength"], name["pattern"]) == (63, "^[-A-Za-z0-9_]+$")
    nodes = components["DeploymentRequestRequest"]["properties"]["nodes"]
    assert nodes["minItems"] == 1


def test_the_schema_is_a_valid_openapi_document(openapi):
    # A default "" inside the pattern branch of a blank-allowed slug (placement.node) failed its own pattern.
    assert openapi["openapi"].startswith("3.0")
    errors = [str(error).splitlines()[0] for error in OpenAPIV30SpecValidator(openapi).iter_errors()]
    assert errors == []
