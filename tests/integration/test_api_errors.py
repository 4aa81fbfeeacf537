"""Bad input gets a clear 4xx in the one error shape ({"detail", "errors": {field: [...]}}), never a 500."""

import json

import pytest
from rest_framework.test import APIClient

from panel.accounts.models import ApiToken
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


# ---- one JSON shape for every error status, DEBUG on or off ------------------------------------------------


@pytest.fixture(params=[False, True], ids=["debug-off", "debug-on"])
def debug(request, settings):
    settings.DEBUG = request.param
    return request.param


def assert_error_shape(response, status):
    assert response.status_code == status, response.content
    assert response["Content-Type"] == "application/json"
    body = json.loads(response.content)  # also for a response no test client made
    assert set(body) <= {"detail", "errors"}
    assert isinstance(body["detail"], str)
    assert body["detail"]
    assert b"ErrorDetail" not in response.content
    return body


@pytest.mark.parametrize(
    ("method", "url"),
    [
        ("get", "/api/v1/no-such-resource/"),
        ("get", "/api/v2/nodes/"),
        # A path missing its trailing slash: test_api_unknown_paths.py (its 404 names the path it needs).
        ("get", "/api/v1/nodes/no-such-node/"),
        ("get", "/api/v1/nodes/424242/"),
        ("get", "/api/v1/nodes/99999999999999999999999999/"),
        ("get", "/api/v1/operations/not-a-uuid/"),
        ("get", "/api/v1/deployments/gone/logs/"),
        ("post", "/api/v1/deployments/gone/chat/"),
    ],
)
def test_every_404_is_json_with_the_one_text(alice, debug, method, url):
    _token, raw = ApiToken.issue(alice, "404s")
    response = getattr(APIClient(), method)(url, HTTP_AUTHORIZATION=f"Bearer {raw}")
    assert assert_error_shape(response, 404) == {"detail": f"No API endpoint or object at {url}."}


def test_a_method_the_endpoint_does_not_take_is_a_json_405(alice, debug):
    response = api_client_for(alice).put("/api/v1/nodes/", {}, format="json")
    assert "PUT" in assert_error_shape(response, 405)["detail"]
    assert "GET" in response["Allow"]


def test_an_answer_type_the_api_cannot_give_is_a_json_406(alice, debug):
    assert_error_shape(api_client_for(alice).get("/api/v1/nodes/", HTTP_ACCEPT="application/xml"), 406)


def test_a_body_type_the_api_cannot_read_is_a_json_415(alice, debug):
    response = api_client_for(alice).post("/api/v1/tokens/", "name,ci", content_type="text/csv")
    assert "text/csv" in assert_error_shape(response, 415)["detail"]


def test_a_10_mb_body_is_a_json_413_before_it_is_read(alice, debug):
    body = '{"name": "' + "x" * (10 * 1024 * 1024) + '"}'
    response = api_client_for(alice).post("/api/v1/tokens/", body, content_type="application/json")
    assert "2.5 MB" in assert_error_shape(response, 413)["detail"]
    assert not ApiToken.objects.filter(user=alice).exists()


def test_an_upload_over_the_upload_limit_is_a_json_413(alice, debug, settings):
    from django.core.files.uploadedfile import SimpleUploadedFile

    settings.PANEL_MAX_UPLOAD_BYTES = 4096
    upload = SimpleUploadedFile("Ascend-cann-toolkit_8.0.RC3_linux-aarch64.run", b"x" * 8192)
    assert_error_shape(
        api_client_for(alice).post("/api/v1/packages/", {"file": upload}, format="multipart"), 413
    )


def test_a_form_with_too_many_fields_is_a_json_error(alice, debug, settings):
    settings.DATA_UPLOAD_MAX_NUMBER_FIELDS = 3
    fields = "&".join(f"f{i}=1" for i in range(10))
    # The package store takes forms (uploads); elsewhere a form is a 415 (test_api_safe_input.py).
    response = api_client_for(alice).post(
        "/api/v1/packages/", fields, content_type="application/x-www-form-urlencoded"
    )
    assert_error_shape(response, 400)


def test_401_and_403_are_json(charlie, debug):
    assert_error_shape(APIClient().get("/api/v1/nodes/"), 401)
    assert_error_shape(api_client_for(charlie).post("/api/v1/nodes/", {"name": "x"}, format="json"), 403)


def test_a_browser_asking_for_html_still_gets_errors_in_json(alice, debug):
    response = api_client_for(alice).get("/api/v1/nodes/?page=0", HTTP_ACCEPT="text/html")
    assert_error_shape(response, 400)


def test_errors_of_a_list_of_objects_have_flat_paths_not_python_reprs():
    """What a many=True serializer reports (a list with {} for each good item) becomes one flat map."""
    from rest_framework import serializers
    from rest_framework.test import APIRequestFactory

    from panel.core.rest.exceptions import exception_handler

    class Placement(serializers.Serializer):
        node = serializers.SlugField()
        npus = serializers.ListField(child=serializers.IntegerField(min_value=0))

    class Spec(serializers.Serializer):
        nodes = Placement(many=True)
        engine = serializers.DictField(child=serializers.IntegerField())

        def validate(self, attrs):
            raise serializers.ValidationError("never reached")

    items = Placement(many=True, data=[{"node": "ok", "npus": [0]}, {"node": "bad name", "npus": [0, -1]}])
    nested = Spec(data={"nodes": [{"node": "a"}, {"npus": ["x"]}], "engine": {"tp": "two"}})
    request = APIRequestFactory().post("/api/v1/x/")
    for serializer, expected in [
        (items, {"[1].node", "[1].npus[1]"}),
        (nested, {"nodes[0].npus", "nodes[1].node", "nodes[1].npus[0]", "engine.tp"}),
    ]:
        assert not serializer.is_valid()
        response = exception_handler(serializers.ValidationError(serializer.errors), {"request": request})
        errors = response.data["errors"]
        assert set(errors) == expected
        assert all(isinstance(m, str) for messages in errors.values() for m in messages)
        assert "ErrorDetail" not in repr(response.data)
        assert response.data["detail"].startswith(next(iter(errors)) + ": ")


def test_the_panels_own_errors_answer_as_drfs_would():
    """Domain code raises InvalidInput and NotAllowed (no DRF): the edge gives the 400 and 403 DRF's
    ValidationError and PermissionDenied gave, in the one error shape."""
    from rest_framework.test import APIRequestFactory

    from panel.core.domain.errors import InvalidInput, NotAllowed
    from panel.core.rest.exceptions import exception_handler

    context = {"request": APIRequestFactory().post("/api/v1/x/")}
    refused = exception_handler(NotAllowed("Only an admin may set --x."), context)
    assert (refused.status_code, refused.data) == (403, {"detail": "Only an admin may set --x."})
    whole = exception_handler(InvalidInput("The spec is a mapping."), context)
    assert whole.status_code == 400
    assert whole.data == {
        "detail": "The spec is a mapping.",
        "errors": {"non_field_errors": ["The spec is a mapping."]},
    }
    nested = exception_handler(InvalidInput({"engine": {"port": ["Taken."]}}), context)
    assert nested.data == {"detail": "engine.port: Taken.", "errors": {"engine.port": ["Taken."]}}


def test_errors_about_a_nested_object_as_a_whole_are_keyed_by_its_path():
    from panel.core.rest.exceptions import flat_errors

    errors = {"nodes": [{}, {"non_field_errors": ["Pick NPUs of one node."]}], "non_field_errors": ["No."]}
    assert flat_errors(errors) == {"nodes[1]": ["Pick NPUs of one node."], "non_field_errors": ["No."]}


@pytest.mark.parametrize("debug_page", [True, False], ids=["technical-500", "plain-500"])
def test_a_server_error_under_api_is_json_even_as_djangos_debug_page(rf, debug_page):
    """DRF re-raises what it does not know; with DEBUG on Django answers its HTML traceback page."""
    import sys

    from django.http import HttpResponseServerError
    from django.views.debug import technical_500_response

    from panel.core.web.middleware import ApiErrorsMiddleware

    def crashing_view(request):
        try:
            raise RuntimeError("boom")
        except RuntimeError:
            if debug_page:
                return technical_500_response(request, *sys.exc_info())
            return HttpResponseServerError("<h1>Server Error (500)</h1>")

    response = ApiErrorsMiddleware(crashing_view)(rf.get("/api/v1/nodes/"))
    body = assert_error_shape(response, 500)
    assert body == {"detail": "The panel failed on this request; its log has the details."}
    page = ApiErrorsMiddleware(crashing_view)(rf.get("/nodes/"))
    assert page["Content-Type"].startswith("text/html")
