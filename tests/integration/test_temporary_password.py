"""A password an admin hands over (a new user, a reset) is temporary: until its owner changes it every page
leads to the page that changes it, the API answers a clear 403 whatever the credential, and the token
sign-in issues no token. The change lifts all of it. Admins are not offered Deactivate on themselves, and
the service refuses it."""

import pytest
from django.contrib.auth import get_user_model
from django.test import Client
from django.urls import reverse
from rest_framework.test import APIClient

from panel.accounts import users
from panel.accounts.models import ApiToken, TemporaryPassword

pytestmark = pytest.mark.django_db

NEW_PASSWORD = "Kunpeng-920-own-pass"


def signed_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def dora(alice):
    user, password = users.create_user(username="dora", role="operator")
    user.handed_over = password
    return user


def change(client, user, next_url="/nodes/"):
    return client.post(
        f"{reverse('accounts:password-required')}?next={next_url}",
        {
            "old_password": user.handed_over,
            "new_password1": NEW_PASSWORD,
            "new_password2": NEW_PASSWORD,
            "next": next_url,
        },
    )


def test_every_page_leads_to_the_password_change_until_it_is_done(dora):
    client = signed_in(dora)
    for page in ("/", "/nodes/", "/accounts/settings/", "/deployments/new/"):
        response = client.get(page)
        assert response.status_code == 302, page
        assert response["Location"].startswith(reverse("accounts:password-required"))
    assert client.get(reverse("accounts:password-required")).status_code == 200
    response = change(client, dora)
    assert response["Location"] == "/nodes/"
    assert client.get("/nodes/").status_code == 200
    assert not TemporaryPassword.objects.filter(user=dora).exists()


def test_the_change_page_sends_nowhere_outside_the_panel(dora):
    response = change(signed_in(dora), dora, next_url="https://evil.example/")
    assert response["Location"] == "/"


def test_the_api_answers_403_saying_why_for_a_session_and_for_a_token(dora):
    session = APIClient()
    session.force_login(dora)
    response = session.get("/api/v1/nodes/")
    assert response.status_code == 403
    assert "temporary" in response.json()["detail"]
    _token, raw = ApiToken.issue(dora, "made-before")  # e.g. by the shell: still refused
    bearer = APIClient()
    bearer.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    assert bearer.get("/api/v1/deployments/").status_code == 403
    change(signed_in(dora), dora)
    assert bearer.get("/api/v1/deployments/").status_code == 200


def test_the_token_sign_in_issues_no_token_for_a_temporary_password(dora):
    response = APIClient().post(
        "/api/v1/tokens/sign-in/",
        {"username": "dora", "password": dora.handed_over, "name": "ci"},
        format="json",
    )
    assert response.status_code == 403
    assert "temporary" in response.json()["detail"]
    assert not ApiToken.objects.filter(user=dora).exists()


def test_a_reset_password_is_temporary_again(dora, alice):
    change(signed_in(dora), dora)
    signed_in(alice).post(reverse("accounts:user-password", args=[dora.pk]))
    assert TemporaryPassword.objects.filter(user=dora).exists()
    fresh = get_user_model().objects.get(pk=dora.pk)
    assert signed_in(fresh).get("/nodes/").status_code == 302


def test_the_users_page_offers_no_deactivate_on_yourself_and_the_service_refuses_it(alice, bob):
    page = signed_in(alice).get(reverse("accounts:users")).content.decode()
    own_row = page.split('data-user="alice"')[1].split("</tr>")[0]
    bobs_row = page.split('data-user="bob"')[1].split("</tr>")[0]
    assert 'data-testid="toggle-active"' not in own_row
    assert 'data-testid="toggle-active"' in bobs_row
    response = signed_in(alice).post(
        reverse("accounts:user-active", args=[alice.pk]), {"active": "0"}, follow=True
    )
    assert "You cannot deactivate yourself" in response.content.decode()
    alice.refresh_from_db()
    assert alice.is_active


def test_add_user_starts_on_viewer(alice):
    page = signed_in(alice).get(reverse("accounts:users")).content.decode()
    form = page.split('data-testid="add-user"')[1].split("</form>")[0]
    assert '<option value="viewer" selected>' in form
    assert '<option value="admin" selected>' not in form
