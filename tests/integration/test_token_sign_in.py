"""POST /api/v1/tokens/sign-in/: a script (ascend-panel login) exchanges a user name and password for a new
token of that user. A password sign-in like the page's: audited, and locked by django-axes the same way."""

from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.test import Client
from rest_framework.test import APIClient

from panel.accounts.models import ApiToken, hash_token
from panel.audit import actions
from panel.audit.models import AuditEntry

pytestmark = pytest.mark.django_db
URL = "/api/v1/tokens/sign-in/"


@pytest.fixture(autouse=True)
def _limits(settings):
    settings.AXES_FAILURE_LIMIT = 3
    settings.AXES_COOLOFF_TIME = timedelta(minutes=15)
    settings.PANEL_API_BASIC_AUTH = False  # as in production: the token is the only way in


def sign_in(client, password, username="bob", name="ci"):
    return client.post(URL, {"username": username, "password": password, "name": name}, format="json")


def test_it_issues_a_token_of_the_user_that_works_and_is_audited(bob):
    client = APIClient(REMOTE_ADDR="198.51.100.30")
    response = sign_in(client, "bob-password")
    assert response.status_code == 201, response.content
    body = response.json()
    token = ApiToken.objects.get(key_hash=hash_token(body["token"]))
    assert (token.user, token.name, body["name"]) == (bob, "ci", "ci")
    worker = APIClient()
    worker.credentials(HTTP_AUTHORIZATION=f"Bearer {body['token']}")
    assert worker.get("/api/v1/nodes/").status_code == 200
    created = AuditEntry.objects.get(action=actions.TOKEN_CREATED)
    assert (created.actor, created.target) == (bob, "ci")
    signed_in = AuditEntry.objects.get(action=actions.SIGNIN_SUCCEEDED)
    assert (signed_in.actor, signed_in.ip) == (bob, "198.51.100.30")


def test_a_wrong_password_gets_401_and_no_token(bob):
    response = sign_in(APIClient(), "guess")
    assert response.status_code == 401
    assert response.json()["detail"] == "Wrong user name or password."
    assert not ApiToken.objects.exists()
    assert AuditEntry.objects.filter(action=actions.SIGNIN_FAILED, target="bob").exists()


def test_repeated_guesses_lock_the_user_at_that_address_even_with_the_right_password(bob):
    attacker = APIClient(REMOTE_ADDR="203.0.113.21")
    codes = [sign_in(attacker, f"guess-{n}").status_code for n in range(3)]
    assert codes[:2] == [401, 401]
    response = sign_in(attacker, "bob-password")
    assert response.status_code == 429
    assert "Too many failed sign-ins" in response.json()["detail"]
    assert not ApiToken.objects.exists()
    office = APIClient(REMOTE_ADDR="198.51.100.31")  # the real user elsewhere is not locked out
    assert sign_in(office, "bob-password").status_code == 201


def test_a_user_without_a_role_gets_no_token(db):
    get_user_model().objects.create_user("dora", password="dora-password")
    response = sign_in(APIClient(), "dora-password", username="dora")
    assert response.status_code == 403
    assert not ApiToken.objects.exists()


def test_an_inactive_user_gets_no_token(bob):
    bob.is_active = False
    bob.save()
    assert sign_in(APIClient(), "bob-password").status_code == 401


def test_a_token_name_twice_is_a_field_error(bob):
    assert sign_in(APIClient(), "bob-password").status_code == 201
    response = sign_in(APIClient(), "bob-password")
    assert response.status_code == 400
    assert "name" in response.json()["errors"]
    assert ApiToken.objects.filter(user=bob).count() == 1


def test_missing_fields_are_field_errors(bob):
    response = APIClient().post(URL, {"username": "bob"}, format="json")
    assert response.status_code == 400
    assert set(response.json()["errors"]) == {"password", "name"}


def test_it_needs_no_csrf_token_and_makes_no_session(bob):
    """Credentials travel in the body, not in a cookie: nothing for a cross-site form to ride on."""
    browser_like = Client(enforce_csrf_checks=True)
    response = browser_like.post(
        URL, {"username": "bob", "password": "bob-password", "name": "x"}, content_type="application/json"
    )
    assert response.status_code == 201
    assert "sessionid" not in response.cookies


def test_the_refusal_is_in_chinese_for_chinese_readers(bob):
    response = APIClient().post(
        URL,
        {"username": "bob", "password": "guess", "name": "ci"},
        format="json",
        HTTP_ACCEPT_LANGUAGE="zh-hans",
    )
    assert response.json()["detail"] == "用户名或密码错误。"
