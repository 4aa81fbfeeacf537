"""A strict, predictable API: what the schema does not document is refused naming it, and every resource
with a name is found by it (Idempotency-Key: test_api_idempotency_keys.py)."""

import hashlib

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from rest_framework.test import APIClient

from panel.accounts.models import ApiToken
from panel.core.rest import strict
from panel.deployments.models import Deployment
from panel.nodes.models import Node
from panel.operations.models import Operation
from tests.conftest import api_client_for
from tests.deployment_helpers import deployment_body

pytestmark = pytest.mark.django_db


def refused(response, *names):
    """A 400 in the one shape naming each of `names` in `errors` and in `detail`."""
    assert response.status_code == 400, response.content
    body = response.json()
    for name in names:
        assert name in body["errors"], body
        assert name in body["detail"], body
        assert all(isinstance(message, str) for message in body["errors"][name])
    return body


# ---- unknown body fields ---------------------------------------------------------------------------------


def test_an_unknown_engine_setting_is_refused_instead_of_planning_without_it(bob, qwen):
    body = deployment_body(qwen, tensor_parallel=4)
    body_of = refused(
        api_client_for(bob).post("/api/v1/deployments/", body, format="json"), "tensor_parallel"
    )
    assert body_of["detail"] == "Unknown field: tensor_parallel."
    assert not Deployment.objects.exists()


def test_an_unknown_field_inside_a_list_item_is_named_by_its_flat_path(bob, qwen):
    body = deployment_body(qwen, nodes=[{"node": "sim-a2", "npus": [0]}, {"node": "sim-a2", "npu": [1]}])
    response = api_client_for(bob).post("/api/v1/deployments/plan/", body, format="json")
    assert refused(response, "nodes[1].npu")["errors"] == {"nodes[1].npu": ["Unknown field."]}


def test_every_unknown_field_is_named_at_once(alice):
    response = api_client_for(alice).post(
        "/api/v1/nodes/",
        {"name": "n1", "adress": "10.0.0.1", "labels": {"rack": "a"}, "port ": 22},
        format="json",
    )
    body = refused(response, "adress", "port ")
    assert body["detail"] == "Unknown fields: adress, port ."
    assert not Node.objects.exists()


def test_free_form_maps_take_any_key(alice, a2):
    response = api_client_for(alice).patch(
        f"/api/v1/nodes/{a2.name}/", {"labels": {"any-key": "x", "rack": "b"}}, format="json"
    )
    assert response.status_code == 200, response.content
    assert response.json()["labels"] == {"any-key": "x", "rack": "b"}


@pytest.mark.parametrize(
    ("method", "url", "body", "field"),
    [
        ("post", "/api/v1/tokens/", {"name": "ci", "expiry": "2030-01-01T00:00:00Z"}, "expiry"),
        ("post", "/api/v1/tokens/", {"name": "ci", "prefix": "abc"}, "prefix"),  # read-only is not input
        ("patch", "/api/v1/nodes/sim-a2/", {"lables": {}}, "lables"),
        ("post", "/api/v1/nodes/sim-a2/metrics-interval/", {"interval_s": 2, "every": 3}, "every"),
        (
            "post",
            "/api/v1/models/",
            {"source": "huggingface", "repo_id": "Qwen/Qwen2.5-0.5B", "tag": "x"},
            "tag",
        ),
        ("post", "/api/v1/models/qwen2.5-0.5b/download/", {"node": "sim-a2", "dest": "/x"}, "dest"),
        ("post", "/api/v1/node-stacks/sim-a2/preflight/", {"profile": "cpu", "reboot": True}, "reboot"),
    ],
)
def test_an_unknown_field_is_refused_naming_it(alice, qwen, method, url, body, field):
    refused(getattr(api_client_for(alice), method)(url, body, format="json"), field)


def test_a_body_sent_to_an_action_that_takes_none_is_refused(bob, a2):
    response = api_client_for(bob).post(f"/api/v1/nodes/{a2.pk}/cordon/", {"force": True}, format="json")
    assert refused(response, "force")["errors"] == {
        "force": ["Unknown field; this endpoint takes no request body."]
    }
    a2.refresh_from_db()
    assert not a2.cordoned
    assert api_client_for(bob).post(f"/api/v1/nodes/{a2.pk}/cordon/", {}, format="json").status_code == 200


def test_an_unknown_multipart_field_is_refused_like_a_json_one(alice, tmp_path, settings):
    settings.DATA_DIR = tmp_path
    upload = SimpleUploadedFile("Ascend-cann-toolkit_8.0.RC3_linux-aarch64.run", b"#!/bin/sh\n")
    response = api_client_for(alice).post(
        "/api/v1/packages/", {"file": upload, "kind": "toolkit"}, format="multipart"
    )
    refused(response, "kind")


# ---- unknown query parameters ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "parameter"),
    [
        ("/api/v1/nodes/?nmae=sim-a2", "nmae"),
        ("/api/v1/nodes/sim-a2/?status=online", "status"),  # list filters do not apply to one object
        ("/api/v1/deployments/?state=running", "state"),
        ("/api/v1/operations/?limit=5", "limit"),
        ("/api/v1/models/?name=qwen", "name"),
        ("/api/v1/metrics/latest/?nodes=sim-a2", "nodes"),
        ("/api/v1/stack-profiles/?chip=910b", "chip"),
        ("/api/v1/tokens/?all=1", "all"),
        ("/api/v1/nodes/sim-a2/metrics/?from=1h", "from"),
    ],
)
def test_an_unknown_query_parameter_is_refused_naming_it_and_what_the_endpoint_takes(
    alice, a2, url, parameter
):
    body = refused(api_client_for(alice).get(url), parameter)
    assert "this endpoint takes" in body["errors"][parameter][0]


def test_the_message_lists_the_parameters_the_endpoint_does_take(alice):
    body = refused(api_client_for(alice).get("/api/v1/alerts/?sevrity=critical"), "sevrity")
    assert body["errors"]["sevrity"] == [
        "Unknown query parameter; this endpoint takes: "
        "acknowledged, deployment, kind, node, nodes, open, page, page_size, severity."
    ]


def test_documented_parameters_and_format_are_taken(alice, a2):
    client = api_client_for(alice)
    assert client.get("/api/v1/nodes/?name=sim-a2&page=1&page_size=5&format=json").status_code == 200
    assert client.delete(f"/api/v1/nodes/{a2.name}/?force=true").status_code == 204


def test_a_format_the_endpoint_does_not_answer_in_is_a_400_naming_format(alice):
    body = refused(api_client_for(alice).get("/api/v1/nodes/?format=xml"), "format")
    assert body["errors"]["format"] == ["Unknown format; this endpoint answers in: api, json."]


def test_a_misspelt_parameter_on_a_delete_deletes_nothing(alice, a2):
    refused(api_client_for(alice).delete(f"/api/v1/nodes/{a2.name}/?froce=true"), "froce")
    assert Node.objects.filter(pk=a2.pk).exists()


def _every_operation():
    strict._load()
    for regex, item in strict._routes:
        for method in item:
            yield regex.pattern, method


def _url(pattern: str) -> str:
    """A concrete URL for a schema path regex: each path parameter becomes "1"."""
    return pattern.strip("^$").replace("[^/]+", "1").replace("\\", "")


def _takes_any_field(pattern: str, method: str) -> bool:
    """Whether the operation's documented body is open (the playground's OpenAI body goes to the engine)."""
    item = next(item for regex, item in strict._routes if regex.pattern == pattern)
    content = item[method].get("requestBody", {}).get("content", {})
    body = next(iter(content.values()), {}).get("schema", {})
    return bool(content) and not strict.unknown_fields({"zz_field": 1}, body)


@pytest.mark.parametrize(("pattern", "method"), list(_every_operation()))
def test_every_documented_operation_refuses_an_undocumented_parameter_and_field(alice, pattern, method):
    """Whatever view answers it (a viewset, an APIView, a plain async view, one added later): the check runs
    before it acts. An API token, as scripts send it: a plain view reads no DRF test credentials."""
    _token, raw = ApiToken.issue(alice, "strict")
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    url = _url(pattern)
    refused(getattr(client, method)(f"{url}?zz_unknown=1"), "zz_unknown")
    if method in ("post", "put", "patch") and not _takes_any_field(pattern, method):
        response = getattr(client, method)(url, {"zz_field": 1}, format="json")
        refused(response, "zz_field")


def test_only_the_playground_documents_an_open_body():
    strict._load()
    open_bodies = [
        (regex.pattern, method)
        for regex, item in strict._routes
        for method in item
        if method in ("post", "put", "patch") and _takes_any_field(regex.pattern, method)
    ]
    assert open_bodies == [("^/api/v1/deployments/[^/]+/chat/$", "post")]


# ---- by name ---------------------------------------------------------------------------------------------


def test_a_node_is_found_by_name_or_id_everywhere_its_id_was(bob, a2):
    client = api_client_for(bob)
    assert client.get("/api/v1/nodes/sim-a2/").json()["id"] == a2.pk
    assert client.get(f"/api/v1/nodes/{a2.pk}/").json()["name"] == "sim-a2"
    assert client.post("/api/v1/nodes/sim-a2/cordon/").json()["cordoned"] is True
    assert client.get("/api/v1/node-stacks/sim-a2/").status_code == 200
    assert client.get(f"/api/v1/node-stacks/{a2.pk}/").json()["node"] == "sim-a2"


def test_a_model_with_dots_in_its_name_is_found_by_it(charlie, qwen):
    model, _artifact = qwen
    assert api_client_for(charlie).get("/api/v1/models/qwen2.5-0.5b/").json()["id"] == model.pk


def test_a_deployment_is_found_by_name_for_detail_logs_actions_and_chat(bob, qwen):
    client = api_client_for(bob)
    created = client.post("/api/v1/deployments/", deployment_body(qwen), format="json")
    assert created.status_code == 201, created.content
    assert client.get("/api/v1/deployments/qwen-chat/").json()["id"] == created.json()["id"]
    assert client.get("/api/v1/deployments/qwen-chat/logs/").json()["deployment"] == "qwen-chat"
    assert client.post("/api/v1/deployments/qwen-chat/stop/").json()["name"] == "qwen-chat"
    _token, raw = ApiToken.issue(bob, "chat")  # the playground view reads API tokens itself
    chat = client.post(
        "/api/v1/deployments/qwen-chat/chat/",
        {"messages": []},
        format="json",
        HTTP_AUTHORIZATION=f"Bearer {raw}",
    )
    assert (chat.status_code, chat.json()["detail"]) == (409, "The deployment is not running.")


def test_packages_and_tokens_are_found_by_name(alice, tmp_path, settings):
    from panel.provisioning.store import add_package

    settings.DATA_DIR = tmp_path
    name = "Ascend-cann-toolkit_8.0.RC3_linux-aarch64.run"
    package = add_package(
        SimpleUploadedFile(name, b"x"), alice, vendor_sha256=hashlib.sha256(b"x").hexdigest()
    )
    token, _raw = ApiToken.issue(alice, "ci-deploys")
    client = api_client_for(alice)
    assert client.get(f"/api/v1/packages/{package.name}/").json()["id"] == package.pk
    assert client.get("/api/v1/tokens/ci-deploys/").json()["id"] == token.pk


def test_a_name_someone_else_holds_is_not_found(charlie, bob):
    ApiToken.issue(bob, "bobs-token")
    response = api_client_for(charlie).get("/api/v1/tokens/bobs-token/")
    assert response.status_code == 404


@pytest.mark.parametrize("resource", ["alerts", "audit", "benchmarks", "model-artifacts", "operations"])
def test_resources_without_a_name_are_found_by_id_only(alice, resource):
    response = api_client_for(alice).get(f"/api/v1/{resource}/some-name/")
    assert response.status_code == 404
    assert response.json() == {"detail": f"No API endpoint or object at /api/v1/{resource}/some-name/."}


def test_an_operation_is_found_by_its_uuid(charlie):
    operation = Operation.objects.create(kind="inventory", target="x")
    assert api_client_for(charlie).get(f"/api/v1/operations/{operation.id}/").json()["id"] == str(
        operation.id
    )


def test_an_id_too_large_for_the_database_is_a_404(charlie):
    response = api_client_for(charlie).get("/api/v1/nodes/99999999999999999999999999/")
    assert response.status_code == 404


def test_a_view_declares_extra_query_parameters_that_the_schema_then_documents():
    """How a view that waits or watches makes `?wait=` and `?timeout=` part of its contract."""
    from django.urls import include, path
    from drf_spectacular.generators import SchemaGenerator
    from drf_spectacular.utils import OpenApiParameter
    from rest_framework import mixins
    from rest_framework.routers import SimpleRouter

    from panel.core.rest.api import PanelViewSet
    from panel.deployments.api.serializers import DeploymentSerializer

    class WaitingViewSet(mixins.CreateModelMixin, mixins.RetrieveModelMixin, PanelViewSet):
        queryset = Deployment.objects.all()
        serializer_class = DeploymentSerializer
        extra_query_params = {
            "create": {
                "wait": "Answer once the deployment is running, stopped or deleted.",
                "timeout": OpenApiParameter("timeout", int, description="Seconds to wait."),
            }
        }

    router = SimpleRouter()
    router.register("waiting", WaitingViewSet)
    document = SchemaGenerator(patterns=[path("api/v1/", include(router.urls))]).get_schema(public=True)
    parameters = {p["name"]: p for p in document["paths"]["/api/v1/waiting/"]["post"]["parameters"]}
    assert parameters["wait"]["schema"] == {"type": "string"}
    assert parameters["wait"]["description"].startswith("Answer once")
    assert parameters["timeout"]["schema"] == {"type": "integer"}
    detail = document["paths"]["/api/v1/waiting/{id}/"]["get"]["parameters"]
    assert [p["name"] for p in detail] == ["id"]  # retrieve declared none


def test_a_node_name_of_digits_only_is_refused_as_it_would_read_as_an_id(alice):
    refused(api_client_for(alice).post("/api/v1/nodes/", {"name": "2024"}, format="json"), "name")


def test_strict_errors_speak_the_clients_language(alice):
    response = api_client_for(alice).get("/api/v1/nodes/?nmae=x", HTTP_ACCEPT_LANGUAGE="zh-hans")
    assert response.json()["detail"] == "未知的查询参数：nmae。"


def test_a_keyed_body_with_an_integer_json_allows_but_orjson_does_not_is_refused_not_a_crash(bob, qwen):
    body = deployment_body(qwen, model=31014682126171835697458720893462118400)
    response = api_client_for(bob).post(
        "/api/v1/deployments/", body, format="json", HTTP_IDEMPOTENCY_KEY="big"
    )
    assert response.status_code == 400
    assert "model" in response.json()["errors"]
