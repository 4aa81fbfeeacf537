"""/api/schema/ tells the truth: error answers, how to authenticate, and id types are documented."""

import pytest
import yaml
from rest_framework.test import APIClient

pytestmark = pytest.mark.django_db


@pytest.fixture
def openapi():
    response = APIClient().get("/api/schema/")
    assert response.status_code == 200
    return yaml.safe_load(response.content)


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


def test_token_ids_are_documented_as_integers(openapi):
    parameters = openapi["paths"]["/api/v1/tokens/{id}/"]["get"]["parameters"]
    assert next(p for p in parameters if p["name"] == "id")["schema"]["type"] == "integer"
