"""/api/schema/ tells the truth: error answers, how to authenticate, and id types are documented; it and
/api/docs/ are for signed-in users and API tokens only, like the rest of the API."""

import pytest
import yaml
from django.test import Client
from django.utils import timezone
from rest_framework.test import APIClient

from panel.accounts.models import ApiToken

pytestmark = pytest.mark.django_db


@pytest.fixture
def openapi(charlie):
    client = Client()
    client.force_login(charlie)
    response = client.get("/api/schema/")
    assert response.status_code == 200
    return yaml.safe_load(response.content)


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
