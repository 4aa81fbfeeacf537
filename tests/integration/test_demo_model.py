"""make run's model: the tiny chat model a sim host generates, registered once with a copy per node and
inspected by the node's agent; the wizard offers only copies vLLM serves, with their own quantization."""

import re
import time

import pytest
from django.test import Client

from panel.catalog.models import Model, ModelArtifact
from panel.nodes.models import Node, Npu
from tests.conftest import api_client_for
from tests.integration.conftest import TEST_NODE

W8A8_FACTS = {"architecture": "LlamaForCausalLM", "dtype": "bfloat16", "quantization": "W8A8_DYNAMIC"}


def signed_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def copies(db):
    node = Node.objects.create(name="a2-node", address="127.0.0.1")
    Npu.objects.create(node=node, npu_id=0, logic_id=0, name="910B3", hbm_total_mb=65536)
    llm = Model.objects.create(
        name="tiny-llm", facts={"architecture": "LlamaForCausalLM", "quantization": None}
    )
    vision = Model.objects.create(name="sample-vision")
    hf = ModelArtifact.objects.create(model=llm, node=node, path="/data/models/tiny", ready=True)
    w8a8 = ModelArtifact.objects.create(
        model=llm,
        node=node,
        path="/data/models/tiny-w8a8",
        format="w8a8_dynamic",
        facts=W8A8_FACTS,
        ready=True,
    )
    onnx = ModelArtifact.objects.create(
        model=vision, node=node, path="/data/models/sample-vision/model.onnx", format="onnx", ready=True
    )
    om = ModelArtifact.objects.create(
        model=vision, node=node, path="/data/models/sample-vision.om", format="om", ready=True
    )
    return {"hf": hf, "w8a8": w8a8, "onnx": onnx, "om": om}


def row_of(html: str, artifact) -> str:
    return re.search(
        rf'<tr>\s*<td><input type="radio" name="artifact" value="{artifact.pk}".*?</tr>', html, re.S
    ).group(0)


@pytest.mark.django_db
def test_the_wizard_offers_hf_and_w8a8_copies_with_their_own_quantization_not_onnx_or_om(bob, copies):
    client = signed_in(bob)
    client.get("/deployments/new/")
    html = client.get("/deployments/new/model/").content.decode()
    offered = set(map(int, re.findall(r'name="artifact" value="(\d+)"', html)))
    assert offered == {copies["hf"].pk, copies["w8a8"].pk}
    assert 'data-field="quantization">W8A8_DYNAMIC<' in row_of(html, copies["w8a8"])
    assert 'data-field="quantization">—<' in row_of(html, copies["hf"])
    assert "sample-vision" not in html  # not offered, and not "to download first" either


@pytest.mark.django_db
def test_the_api_refuses_to_deploy_an_onnx_or_om_copy_and_says_why(bob, copies):
    for kind in ("onnx", "om"):
        artifact = copies[kind]
        body = {
            "name": "vision",
            "model": artifact.model_id,
            "artifact": artifact.pk,
            "nodes": [{"node": "a2-node", "npus": [0]}],
        }
        response = api_client_for(bob).post("/api/v1/deployments/plan/", body, format="json")
        assert response.status_code == 400, response.json()
        assert "vLLM cannot serve" in str(response.json()), response.json()


@pytest.mark.django_db
def test_the_model_pages_show_a_w8a8_copys_quantization(charlie, copies):
    client = signed_in(charlie)
    model = copies["w8a8"].model
    detail = client.get(f"/models/{model.pk}/").content.decode()
    assert 'data-field="quantization">W8A8_DYNAMIC<' in detail
    listing = client.get("/models/").content.decode()
    assert 'data-field="quantization">W8A8_DYNAMIC<' in listing


@pytest.mark.django_db(transaction=True)
@pytest.mark.timeout(120)
def test_the_generated_chat_model_is_registered_once_and_inspected_by_the_agent(celery_worker):
    from panel.catalog.demo import DEMO_MODEL_NAME, ensure_demo_model
    from workers.sim.__main__ import TINY_CHAT_MODEL, write_tiny_chat_model

    assert write_tiny_chat_model(celery_worker.sim_root / TINY_CHAT_MODEL)
    assert not write_tiny_chat_model(celery_worker.sim_root / TINY_CHAT_MODEL)  # kept at the next start
    Node.objects.create(name=TEST_NODE, transport="agent")
    path = "/" + TINY_CHAT_MODEL

    assert len(ensure_demo_model([TEST_NODE], path)) == 1
    assert ensure_demo_model([TEST_NODE], path) == []  # its inspection is still open
    deadline = time.monotonic() + 60
    artifact = ModelArtifact.objects.get(node__name=TEST_NODE, path=path)
    while not artifact.ready and time.monotonic() < deadline:
        time.sleep(0.3)
        artifact.refresh_from_db()
    assert artifact.ready
    model = Model.objects.get(name=DEMO_MODEL_NAME)
    assert model.facts["architecture"] == "LlamaForCausalLM"
    assert model.facts["has_chat_template"] is True
    assert ensure_demo_model([TEST_NODE], path) == []  # a restart registers nothing twice
    assert Model.objects.filter(name=DEMO_MODEL_NAME).count() == 1
    assert ModelArtifact.objects.filter(model=model).count() == 1


@pytest.mark.django_db
def test_an_unknown_node_is_a_clear_error(db):
    from panel.catalog.demo import ensure_demo_model

    with pytest.raises(ValueError, match="no node named ghost; create it first"):
        ensure_demo_model(["ghost"], "/data/models/tiny-chat")
