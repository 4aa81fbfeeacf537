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


def test_tokens_from_before_scopes_keep_the_owners_full_rights(charlie):
    token, raw = ApiToken.issue(charlie, "old-script")
    assert token.scopes == ["admin"]
    assert bearer(raw).get("/api/v1/tokens/").status_code == 200
    assert bearer(raw).post("/api/v1/tokens/", {"name": "child"}, format="json").status_code == 201


def test_an_inference_key_reaches_only_the_gateway_and_a_deploy_key_no_credentials(bob):
    _token, inference = ApiToken.issue(bob, "app", scopes=["inference"])
    refused = bearer(inference).get("/api/v1/deployments/")
    assert refused.status_code == 403
    assert refused.json()["detail"].endswith("(it needs deploy).")
    _token, deploy = ApiToken.issue(bob, "ci", scopes=["deploy"])
    assert bearer(deploy).get("/api/v1/deployments/").status_code == 200
    assert bearer(deploy).get("/api/v1/tokens/").status_code == 403
    assert bearer(deploy).post("/api/v1/tokens/", {"name": "x"}, format="json").status_code == 403


def test_a_token_cannot_mint_a_wider_token(alice):
    from datetime import timedelta

    from django.utils import timezone

    expires = timezone.now() + timedelta(days=7)
    parent, raw = ApiToken.issue(
        alice,
        "limited",
        expires=expires,
        scopes=["admin"],
        allowed_models=["qwen"],
        requests_per_minute=60,
        tokens_per_minute=1000,
    )
    client = bearer(raw)
    wider = client.post(
        "/api/v1/tokens/",
        {"name": "wider", "models": ["qwen", "deepseek"], "requests_per_minute": 120},
        format="json",
    )
    assert wider.status_code == 403
    assert set(wider.json()["errors"]) == {"models", "requests_per_minute", "expires"}
    narrower = client.post(
        "/api/v1/tokens/",
        {
            "name": "narrower",
            "scopes": ["inference"],
            "models": ["qwen"],
            "requests_per_minute": 10,
            "tokens_per_minute": 500,
            "expires": (expires - timedelta(days=1)).isoformat(),
        },
        format="json",
    )
    assert narrower.status_code == 201, narrower.json()
    assert narrower.json()["scopes"] == ["inference"]
    # Left out, a token's fields are its issuer's: the child is no wider than its parent.
    inherited = client.post(
        "/api/v1/tokens/", {"name": "same", "expires": expires.isoformat()}, format="json"
    ).json()
    assert (inherited["scopes"], inherited["models"], inherited["requests_per_minute"]) == (
        ["admin"],
        ["qwen"],
        60,
    )


def test_a_session_may_give_any_scope_and_the_page_shows_scopes_models_and_limits(bob, client):
    client.force_login(bob)
    response = client.post(
        "/accounts/tokens/",
        {
            "name": "chat-app",
            "scopes-shown": "1",
            "scopes": ["inference"],
            "models": "qwen, deepseek",
            "requests_per_minute": "30",
        },
    )
    assert response.status_code == 302
    token = ApiToken.objects.get(user=bob, name="chat-app")
    assert (token.scopes, token.allowed_models, token.requests_per_minute) == (
        ["inference"],
        ["deepseek", "qwen"],
        30,
    )
    page = client.get("/accounts/settings/").content.decode()
    assert "deepseek, qwen" in page
    empty = client.post("/accounts/tokens/", {"name": "none", "scopes-shown": "1"})
    assert empty.status_code == 200
    assert not ApiToken.objects.filter(name="none").exists()
