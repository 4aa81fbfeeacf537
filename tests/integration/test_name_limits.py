"""Too-long or malformed names are refused with a message naming the field, its limit and the characters it
may hold — in the pages and in the API — and nothing is stored cut to fit: deployment names (63), user
names (150, no markup), API token names (100)."""

import pytest
from django.contrib.auth import get_user_model
from django.urls import reverse

from panel.accounts.models import ApiToken
from panel.catalog.models import Model, ModelArtifact
from panel.core.domain.choices import NpuHealth
from panel.deployments.models import Deployment
from panel.nodes.models import Node, Npu
from tests.conftest import api_client_for
from tests.wizard_steps import SMALL_QWEN, client_for

pytestmark = pytest.mark.django_db

LONG_DEPLOYMENT = "d" * 300


@pytest.fixture
def artifact(db):
    node = Node.objects.create(name="a2-node", address="127.0.0.1")
    Npu.objects.create(node=node, npu_id=0, logic_id=0, name="910B3", health=NpuHealth.OK, hbm_total_mb=65536)
    model = Model.objects.create(name="Qwen/Qwen2.5-0.5B-Instruct", facts=SMALL_QWEN)
    return ModelArtifact.objects.create(model=model, node=node, path="/models/qwen2.5-0.5b", ready=True)


def test_the_wizard_refuses_a_300_character_deployment_name_and_says_the_limit(bob, artifact):
    client = client_for(bob)
    client.get("/deployments/new/")
    page = client.get("/deployments/new/model/").content.decode()
    assert 'maxlength="63"' not in page  # a browser would cut a pasted name without a word
    response = client.post("/deployments/new/model/", {"artifact": artifact.pk, "name": LONG_DEPLOYMENT})
    assert response.status_code == 200
    text = response.content.decode()
    assert "Deployment name is 300 characters long; it may be at most 63" in text
    assert "letters a-z and A-Z, digits, - and _" in text


def test_the_wizard_refuses_a_deployment_name_with_other_characters(bob, artifact):
    client = client_for(bob)
    client.get("/deployments/new/")
    response = client.post("/deployments/new/model/", {"artifact": artifact.pk, "name": "my model!"})
    assert "Deployment name may hold only letters a-z and A-Z, digits, - and _" in response.content.decode()


@pytest.mark.parametrize(
    ("method", "path"),
    [("post", "/api/v1/deployments/"), ("put", "/api/v1/deployments/fine-name/")],
)
def test_the_api_refuses_a_long_deployment_name_on_the_name_field(bob, artifact, method, path):
    body = {
        "name": LONG_DEPLOYMENT,
        "model": artifact.model_id,
        "nodes": [{"node": "a2-node", "npus": [0]}],
    }
    if method == "put":
        body = {"name": LONG_DEPLOYMENT, "model": artifact.model.name, "path": artifact.path}
    response = getattr(api_client_for(bob), method)(path, body, format="json")
    assert response.status_code == 400, response.content
    (message,) = response.json()["errors"]["name"]
    assert "300 characters long; it may be at most 63" in message
    assert not Deployment.objects.exists()


def test_a_user_name_with_markup_or_200_characters_is_refused_not_stored_cut(alice):
    admin = client_for(alice)
    page = admin.get(reverse("accounts:users")).content.decode()
    assert 'maxlength="150"' not in page
    response = admin.post(reverse("accounts:users"), {"username": "<b>x</b>", "role": "viewer"}, follow=True)
    assert "User name may hold only letters, digits and @ . + - _" in response.content.decode()
    response = admin.post(reverse("accounts:users"), {"username": "u" * 200, "role": "viewer"}, follow=True)
    assert "User name is 200 characters long; it may be at most 150" in response.content.decode()
    assert (
        not get_user_model()
        .objects.exclude(username="alice")
        .filter(is_staff=False)
        .filter(username__startswith="u" * 150)
        .exists()
    )
    assert not get_user_model().objects.filter(username__contains="<").exists()


def test_a_token_name_over_100_characters_is_refused_in_the_settings_page(charlie):
    client = client_for(charlie)
    response = client.post(
        reverse("accounts:create-token"),
        {"name": "t" * 101, "scopes": ["inference"], "scopes-shown": "1"},
        follow=True,
    )
    assert "Token name is 101 characters long; it may be at most 100" in response.content.decode()
    assert not ApiToken.objects.filter(user=charlie).exists()


@pytest.mark.parametrize(
    ("name", "said"),
    [("t" * 101, "101 characters long; it may be at most 100"), ("ci<script>", "not “<>”")],
)
def test_the_api_refuses_a_bad_token_name_on_the_name_field(alice, name, said):
    response = api_client_for(alice).post("/api/v1/tokens/", {"name": name}, format="json")
    assert response.status_code == 400
    (message,) = response.json()["errors"]["name"]
    assert said in message
    assert "letters, digits, spaces and . : @ / + - _" in message
    assert not ApiToken.objects.filter(user=alice).exists()


def test_the_schema_documents_the_limits(alice):
    schema = api_client_for(alice).get("/api/schema/?format=json").json()
    token = schema["components"]["schemas"]["ApiTokenRequest"]["properties"]["name"]
    assert token["maxLength"] == 100
    assert "At most 100 characters" in token["description"]
