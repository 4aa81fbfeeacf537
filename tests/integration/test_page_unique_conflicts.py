"""A page form that loses its insert to another request made at the same moment answers 409 with what
happened, in the panel's layout and the reader's language, as the API does; other integrity errors
stay 500."""

import pytest
from django.db import IntegrityError
from django.test import Client

from panel.catalog import services
from panel.catalog.models import Model

pytestmark = pytest.mark.django_db


def client_for(user, language="en") -> Client:
    client = Client(HTTP_ACCEPT_LANGUAGE=language)
    client.force_login(user)
    return client


@pytest.mark.parametrize(("language", "heading"), [("en", "Made meanwhile"), ("zh-hans", "已被同时创建")])
def test_a_register_that_loses_its_name_to_another_request_is_a_409_page(
    alice, monkeypatch, language, heading
):
    # The form found the name free; another admin's register took it before this one's insert.
    Model.objects.create(name="Qwen2.5-0.5B-Instruct")
    monkeypatch.setattr(services, "_unique_name", lambda base: base)
    answer = client_for(alice, language).post(
        "/models/register/", {"source": "huggingface", "repo_id": "Qwen/Qwen2.5-0.5B-Instruct"}
    )
    assert answer.status_code == 409
    page = answer.content.decode()
    assert heading in page
    assert 'data-testid="conflict"' in page
    assert Model.objects.filter(name="Qwen2.5-0.5B-Instruct").count() == 1


def test_an_integrity_error_that_is_not_a_unique_hit_stays_a_server_error(alice, monkeypatch):
    def broken(**kwargs):
        raise IntegrityError("NOT NULL constraint failed: catalog_model.name")

    monkeypatch.setattr(services, "register_model", broken)
    client = client_for(alice)
    client.raise_request_exception = False
    answer = client.post(
        "/models/register/", {"source": "huggingface", "repo_id": "Qwen/Qwen2.5-0.5B-Instruct"}
    )
    assert answer.status_code == 500
