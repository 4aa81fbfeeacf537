"""Bad input gets a clear 4xx in the one error shape ({"detail", "errors": {field: [...]}}), never a 500."""

import pytest
from rest_framework.test import APIClient

from panel.nodes.models import Node
from panel.operations.models import Operation
from tests.conftest import api_client_for

pytestmark = pytest.mark.django_db


def assert_field_error(response, field):
    assert response.status_code == 400, response.content
    body = response.json()
    assert isinstance(body["detail"], str)
    assert body["detail"]
    assert field in body["errors"]
    assert all(isinstance(message, str) for message in body["errors"][field])


def test_an_unauthenticated_request_gets_401_with_a_bearer_challenge():
    response = APIClient().get("/api/v1/nodes/")
    assert response.status_code == 401
    assert response["WWW-Authenticate"] == "Bearer"
    assert response.json()["detail"]


@pytest.mark.parametrize("page", ["0", "-1", "abc", "1.5", "99"])
def test_a_page_that_does_not_exist_is_refused_naming_page(charlie, page):
    Node.objects.create(name="only-node")
    assert_field_error(api_client_for(charlie).get(f"/api/v1/nodes/?page={page}"), "page")


@pytest.mark.parametrize("size", ["0", "-5", "many"])
def test_a_nonsense_page_size_is_refused_naming_page_size(charlie, size):
    assert_field_error(api_client_for(charlie).get(f"/api/v1/nodes/?page_size={size}"), "page_size")


def test_a_huge_page_size_is_clamped_to_the_maximum(charlie):
    response = api_client_for(charlie).get("/api/v1/nodes/?page_size=99999999999999999999")
    assert response.status_code == 200


def test_the_last_page_can_be_asked_for_by_name(charlie):
    Node.objects.bulk_create([Node(name=f"n{i}") for i in range(3)])
    response = api_client_for(charlie).get("/api/v1/nodes/?page_size=2&page=last")
    assert response.status_code == 200
    assert len(response.json()["results"]) == 1


@pytest.mark.parametrize(
    ("url", "field"),
    [
        ("/api/v1/operations/?status=exploded", "status"),
        ("/api/v1/operations/?kind=nonsense", "kind"),
        ("/api/v1/alerts/?severity=apocalyptic", "severity"),
        ("/api/v1/alerts/?open=maybe", "open"),
        ("/api/v1/alerts/?acknowledged=perhaps", "acknowledged"),
        ("/api/v1/nodes/?cordoned=sometimes", "cordoned"),
    ],
)
def test_a_filter_with_a_bad_value_is_refused_naming_the_filter(charlie, url, field):
    assert_field_error(api_client_for(charlie).get(url), field)


@pytest.mark.parametrize(("value", "listed"), [("true", ["held"]), ("0", ["free"]), ("", ["free", "held"])])
def test_yes_no_filters_understand_the_usual_spellings(charlie, value, listed):
    Node.objects.create(name="held", cordoned=True)
    Node.objects.create(name="free")
    response = api_client_for(charlie).get(f"/api/v1/nodes/?cordoned={value}")
    assert sorted(node["name"] for node in response.json()["results"]) == listed


def test_the_alerts_page_still_renders_with_a_bad_yes_no_filter(charlie):
    client = api_client_for(charlie)
    client.force_login(charlie)
    assert client.get("/alerts/?open=maybe").status_code == 200


def test_a_validation_error_lists_every_field_at_fault(alice):
    response = api_client_for(alice).post("/api/v1/tokens/", {"name": ""}, format="json")
    assert_field_error(response, "name")


def test_a_body_that_is_not_json_is_refused_in_the_error_shape(alice):
    response = api_client_for(alice).post("/api/v1/tokens/", "{not json", content_type="application/json")
    assert response.status_code == 400
    assert "JSON" in response.json()["detail"]


def test_an_api_url_no_route_matches_gets_a_json_404_not_an_html_page(charlie):
    response = api_client_for(charlie).post("/api/v1/nodes/0.5/no-such-action/")
    assert response.status_code == 404
    assert response["Content-Type"] == "application/json"
    assert "/api/v1/nodes/0.5/no-such-action/" in response.json()["detail"]


def test_a_page_url_no_route_matches_still_gets_the_html_404(charlie):
    client = api_client_for(charlie)
    response = client.get("/nodes/no/such/page/")
    assert response.status_code == 404
    assert response["Content-Type"].startswith("text/html")


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ("limit=-189", "limit"),
        ("limit=0", "limit"),
        ("after_seq=-1", "after_seq"),
        ("after_seq=1e999", "after_seq"),
        ("after_seq=99999999999999999999999", "after_seq"),
    ],
)
def test_operation_events_refuse_a_bad_limit_or_after_seq_naming_it(charlie, query, field):
    operation = Operation.objects.create(kind="inventory", target="x")
    response = api_client_for(charlie).get(f"/api/v1/operations/{operation.id}/events/?{query}")
    assert_field_error(response, field)


def test_operation_events_clamp_a_huge_limit(charlie):
    operation = Operation.objects.create(kind="inventory", target="x")
    response = api_client_for(charlie).get(f"/api/v1/operations/{operation.id}/events/?limit=10000000")
    assert response.status_code == 200
    assert response.json()["results"] == []


def test_a_nul_character_in_a_query_parameter_is_a_400_not_a_database_error(alice):
    response = api_client_for(alice).get("/api/v1/metrics/latest/", {"node": "a\x00b"})
    assert response.status_code == 400
    assert "NUL" in response.json()["detail"]


@pytest.mark.parametrize(
    ("query", "field"), [("limit=-9892", "limit"), ("after_seq=-1", "after_seq"), ("limit=x", "limit")]
)
def test_a_nonsense_log_page_is_refused_naming_the_parameter(charlie, query, field):
    from panel.catalog.models import Model
    from panel.deployments.models import Deployment

    model = Model.objects.create(name="logs-model")
    deployment = Deployment.objects.create(name="logs-deployment", model=model, spec={"parts": []})
    response = api_client_for(charlie).get(f"/api/v1/deployments/{deployment.pk}/logs/?{query}")
    assert_field_error(response, field)
