"""API tokens: stored hashed, shown once, expiring, revocable, last use recorded."""

from datetime import timedelta

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from panel.accounts.models import ApiToken, hash_token
from tests.conftest import api_client_for

pytestmark = pytest.mark.django_db


def bearer(raw):
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    return client


def test_a_created_token_is_shown_once_and_stored_hashed(alice):
    response = api_client_for(alice).post("/api/v1/tokens/", {"name": "ci"}, format="json")
    assert response.status_code == 201
    raw = response.json()["token"]
    stored = ApiToken.objects.get(name="ci")
    assert stored.key_hash == hash_token(raw)
    assert raw not in stored.key_hash
    listed = api_client_for(alice).get("/api/v1/tokens/").json()["results"][0]
    assert "token" not in listed
    assert listed["prefix"] == raw[:10]


def test_a_token_authenticates_and_records_its_last_use(charlie):
    token, raw = ApiToken.issue(charlie, "script")
    assert bearer(raw).get("/api/v1/nodes/").status_code == 200
    token.refresh_from_db()
    assert token.last_used is not None


def test_revoked_tokens_are_refused(charlie):
    token, raw = ApiToken.issue(charlie, "old")
    assert api_client_for(charlie).delete(f"/api/v1/tokens/{token.pk}/").status_code == 204
    response = bearer(raw).get("/api/v1/nodes/")
    assert response.status_code == 401
    assert "revoked" in response.json()["detail"]


def test_expired_tokens_are_refused(charlie):
    token, raw = ApiToken.issue(charlie, "short", expires=timezone.now() + timedelta(minutes=1))
    ApiToken.objects.filter(pk=token.pk).update(expires=timezone.now() - timedelta(seconds=1))
    assert bearer(raw).get("/api/v1/nodes/").status_code == 401


def test_a_garbage_token_is_refused():
    assert bearer("ap_nonsense").get("/api/v1/nodes/").status_code == 401


def test_it_rejects_a_token_name_twice_with_a_field_error(alice):
    client = api_client_for(alice)
    client.post("/api/v1/tokens/", {"name": "dup"}, format="json")
    response = client.post("/api/v1/tokens/", {"name": "dup"}, format="json")
    assert response.status_code == 400
    assert "name" in response.json()["errors"]


def test_it_rejects_an_expiry_in_the_past(alice):
    past = (timezone.now() - timedelta(days=1)).isoformat()
    response = api_client_for(alice).post("/api/v1/tokens/", {"name": "p", "expires": past}, format="json")
    assert response.status_code == 400
    assert "expires" in response.json()["errors"]


def test_users_see_only_their_own_tokens(alice, bob):
    ApiToken.issue(bob, "bobs")
    assert api_client_for(alice).get("/api/v1/tokens/").json()["count"] == 0


def test_a_viewer_can_create_tokens_for_itself_from_the_settings_page(charlie, client):
    client.force_login(charlie)
    response = client.post("/accounts/tokens/", {"name": "mine", "lifetime": "30"})
    assert response.status_code == 302
    page = client.get("/accounts/settings/").content.decode()
    token = ApiToken.objects.get(user=charlie, name="mine")
    assert token.expires is not None
    assert token.prefix in page
