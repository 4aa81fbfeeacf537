"""Idempotency-Key on the API: a key replays its creation while the object exists and never once it is
gone, a key is bound to its request (body in any key order, query, upload digest, YAML as its JSON twin),
and the schema documents the headers where they are honoured."""

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from panel.catalog.models import Model
from panel.deployments.models import Deployment
from tests.conftest import api_client_for
from tests.deployment_helpers import deployment_body

pytestmark = pytest.mark.django_db


def test_a_key_replays_the_creation_while_its_deployment_exists(bob, qwen):
    client = api_client_for(bob)
    first = client.post(
        "/api/v1/deployments/", deployment_body(qwen), format="json", HTTP_IDEMPOTENCY_KEY="ci-7"
    )
    again = client.post(
        "/api/v1/deployments/", deployment_body(qwen), format="json", HTTP_IDEMPOTENCY_KEY="ci-7"
    )
    assert (again.status_code, again["Idempotent-Replay"]) == (201, "true")
    assert again.json()["id"] == first.json()["id"]
    assert Deployment.objects.count() == 1


def test_a_key_reused_after_the_deployment_was_deleted_deploys_again(bob, qwen):
    client = api_client_for(bob)
    body = deployment_body(qwen)
    first = client.post("/api/v1/deployments/", body, format="json", HTTP_IDEMPOTENCY_KEY="pipeline-1")
    assert client.delete("/api/v1/deployments/qwen-chat/").status_code == 202  # stopping, then removed
    again = client.post("/api/v1/deployments/", body, format="json", HTTP_IDEMPOTENCY_KEY="pipeline-1")
    assert again.status_code == 201, again.content
    assert "Idempotent-Replay" not in again
    assert again.json()["id"] != first.json()["id"]
    assert Deployment.objects.get(name="qwen-chat").pk == again.json()["id"]
    replay = client.post("/api/v1/deployments/", body, format="json", HTTP_IDEMPOTENCY_KEY="pipeline-1")
    assert (replay.json()["id"], replay["Idempotent-Replay"]) == (again.json()["id"], "true")


def test_a_key_whose_model_row_is_gone_registers_the_model_again(alice, a2):
    client = api_client_for(alice)
    body = {"source": "huggingface", "repo_id": "Qwen/Qwen2.5-0.5B-Instruct", "name": "qwen-half"}
    first = client.post("/api/v1/models/", body, format="json", HTTP_IDEMPOTENCY_KEY="models-1")
    assert first.status_code == 201, first.content
    Model.objects.filter(pk=first.json()["id"]).delete()
    again = client.post("/api/v1/models/", body, format="json", HTTP_IDEMPOTENCY_KEY="models-1")
    assert (again.status_code, again.json()["name"]) == (201, "qwen-half")
    assert "Idempotent-Replay" not in again


def test_a_key_sent_with_another_body_or_query_is_refused(bob, qwen):
    client = api_client_for(bob)
    client.post("/api/v1/deployments/", deployment_body(qwen), format="json", HTTP_IDEMPOTENCY_KEY="ci-8")
    other = deployment_body(qwen, name="other-name")
    mismatch = client.post("/api/v1/deployments/", other, format="json", HTTP_IDEMPOTENCY_KEY="ci-8")
    assert mismatch.status_code == 422
    assert "another request body" in mismatch.json()["detail"]
    assert not Deployment.objects.filter(name="other-name").exists()


def test_the_same_body_in_another_key_order_is_the_same_request(bob, qwen):
    client = api_client_for(bob)
    body = deployment_body(qwen)
    client.post("/api/v1/deployments/", body, format="json", HTTP_IDEMPOTENCY_KEY="ci-9")
    reordered = dict(reversed(list(body.items())))
    again = client.post("/api/v1/deployments/", reordered, format="json", HTTP_IDEMPOTENCY_KEY="ci-9")
    assert again["Idempotent-Replay"] == "true"


def test_an_upload_is_bound_by_its_content_type_fields_and_file_digest(alice):
    from rest_framework.parsers import MultiPartParser
    from rest_framework.request import Request
    from rest_framework.test import APIRequestFactory

    from panel.core.rest.idempotency import _body_hash

    def hashed(content: bytes, query=""):
        upload = SimpleUploadedFile("toolkit.run", content)
        raw = APIRequestFactory().post(f"/api/v1/packages/{query}", {"file": upload}, format="multipart")
        request = Request(raw, parsers=[MultiPartParser()])
        digest = _body_hash(request)
        assert request.data["file"].read() == content  # the view still reads the whole file
        return digest

    assert hashed(b"one") == hashed(b"one")
    assert hashed(b"one") != hashed(b"two")
    assert hashed(b"one") != hashed(b"one", "?dry_run=true")
    assert hashed(b"one") == hashed(b"one", "?wait=running&timeout=60")


def test_a_yaml_body_is_bound_by_what_it_says_like_its_json_twin(alice):
    """The spec may come as YAML (Content-Type: application/yaml): its key is bound to the parsed body, so
    layout and comments do not matter, and the same spec in JSON is the same request."""
    import yaml
    from rest_framework.parsers import BaseParser, JSONParser
    from rest_framework.request import Request
    from rest_framework.test import APIRequestFactory

    from panel.core.rest.idempotency import _body_hash

    class YamlParser(BaseParser):  # what the apply endpoint reads YAML with
        media_type = "application/yaml"

        def parse(self, stream, media_type=None, parser_context=None):
            return yaml.safe_load(stream.read())

    def hashed(body: bytes, content_type: str):
        raw = APIRequestFactory().put("/api/v1/deployments/qwen-chat/", body, content_type=content_type)
        return _body_hash(Request(raw, parsers=[YamlParser(), JSONParser()]))

    spec = b"name: qwen-chat\nmodel: qwen2.5-7b\nplacement: {node: sim-a2, npus: 2}\n"
    commented = b"# CI spec\nmodel: qwen2.5-7b\nname: qwen-chat\nplacement:\n  npus: 2\n  node: sim-a2\n"
    as_json = b'{"name": "qwen-chat", "model": "qwen2.5-7b", "placement": {"node": "sim-a2", "npus": 2}}'
    assert hashed(spec, "application/yaml") == hashed(commented, "application/yaml")
    assert hashed(spec, "application/yaml") == hashed(as_json, "application/json")
    assert hashed(spec, "application/yaml") != hashed(
        spec.replace(b"npus: 2", b"npus: 4"), "application/yaml"
    )


@pytest.mark.parametrize(
    ("path", "answer"),
    [
        ("/api/v1/deployments/", "201"),
        ("/api/v1/models/", "201"),
        ("/api/v1/node-stacks/{name}/install/", "202"),
    ],
)
def test_the_schema_documents_both_idempotency_headers_where_they_are_honoured(openapi, path, answer):
    paths = openapi["paths"]
    operation = paths[path]["post"]
    header = next(p for p in operation["parameters"] if p["in"] == "header")
    assert (header["name"], header["schema"]["maxLength"]) == ("Idempotency-Key", 200)
    assert "Idempotent-Replay" in operation["responses"][answer]["headers"]
    assert {"409", "422"} <= set(operation["responses"])
    assert not any(p["in"] == "header" for p in paths["/api/v1/nodes/"]["post"].get("parameters", []))
