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


def test_token_ids_are_documented_as_integers(openapi):
    parameters = openapi["paths"]["/api/v1/tokens/{id}/"]["get"]["parameters"]
    assert next(p for p in parameters if p["name"] == "id")["schema"]["type"] == "integer"


def property_of(openapi, component, name):
    return openapi["components"]["schemas"][component]["properties"][name]


@pytest.mark.parametrize(
    ("component", "name"),
    [("Alert", "acknowledged_by"), ("Operation", "created_by"), ("OperationEventPage", "final_seq")],
)
def test_fields_the_api_sends_as_null_are_documented_nullable(openapi, component, name):
    assert property_of(openapi, component, name)["nullable"] is True


def test_a_model_without_facts_may_have_an_empty_facts_source(openapi):
    choices = property_of(openapi, "Model", "facts_source")["oneOf"]
    assert {"$ref": "#/components/schemas/BlankEnum"} in choices


@pytest.mark.parametrize(
    ("method", "path", "codes"),
    [
        ("post", "/api/v1/nodes/{id}/inventory/", {"202", "409"}),
        ("post", "/api/v1/nodes/{id}/install-agent/", {"202", "409"}),
        ("post", "/api/v1/nodes/{id}/metrics-interval/", {"202"}),
        ("delete", "/api/v1/nodes/{id}/", {"204", "409"}),
        ("delete", "/api/v1/model-artifacts/{id}/", {"202", "400"}),
        ("post", "/api/v1/model-artifacts/{id}/inspect/", {"202"}),
        ("post", "/api/v1/models/", {"201"}),
    ],
)
def test_actions_document_the_status_codes_they_answer(openapi, method, path, codes):
    responses = openapi["paths"][path][method]["responses"]
    assert codes <= set(responses)
    assert "200" not in responses


def test_operation_events_document_their_own_page_and_no_list_filters(openapi):
    operation = openapi["paths"]["/api/v1/operations/{id}/events/"]["get"]
    names = {parameter["name"] for parameter in operation["parameters"]}
    assert names == {"id", "after_seq", "limit"}
    schema = operation["responses"]["200"]["content"]["application/json"]["schema"]
    assert schema == {"$ref": "#/components/schemas/OperationEventPage"}


def test_a_deployments_computed_fields_have_exact_types(openapi):
    npus = property_of(openapi, "Deployment", "npus")
    assert npus["type"] == "array"
    npu = openapi["components"]["schemas"][npus["items"]["$ref"].rsplit("/", 1)[1]]
    assert npu["properties"]["logic_id"]["type"] == "integer"
    assert property_of(openapi, "Deployment", "operation") == {
        "type": "string", "format": "uuid", "nullable": True, "readOnly": True,
        "description": property_of(openapi, "Deployment", "operation")["description"],
    }  # fmt: skip
    findings = property_of(openapi, "Deployment", "findings")
    assert findings["allOf"][0]["$ref"] == "#/components/schemas/DeploymentFindings"
