"""Admins manage users inside the panel: list, add with a role and a one-time password, change the role,
deactivate (sessions and tokens stop), reset the password; the panel never loses its last admin, and only
admins reach any of it."""

import pytest
from django.contrib.auth import get_user_model
from django.test import Client
from django.urls import reverse

from panel.accounts.roles import role_of

pytestmark = pytest.mark.django_db


def signed_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_an_admin_adds_a_user_who_signs_in_with_the_password_shown_once(alice):
    admin = signed_in(alice)
    page = admin.post(reverse("accounts:users"), {"username": "dora", "role": "operator"}, follow=True)
    password = page.context["handover"]["password"]
    assert password in page.content.decode()
    dora = get_user_model().objects.get(username="dora")
    assert role_of(dora) == "operator"
    assert Client().login(username="dora", password=password)
    again = admin.get(reverse("accounts:users")).content.decode()
    assert password not in again  # shown once
    assert 'data-user="dora"' in again


def test_a_duplicate_name_or_an_unknown_role_is_refused_with_a_reason(alice, bob):
    admin = signed_in(alice)
    page = admin.post(reverse("accounts:users"), {"username": "BOB", "role": "viewer"}, follow=True)
    assert "A user named BOB exists already." in page.content.decode()
    page = admin.post(reverse("accounts:users"), {"username": "eve", "role": "root"}, follow=True)
    assert "Choose one of: Admin, Operator, Viewer." in page.content.decode()
    assert not get_user_model().objects.filter(username="eve").exists()


def test_changing_a_role_takes_effect_at_once(alice, charlie):
    admin = signed_in(alice)
    admin.post(reverse("accounts:user-role", args=[charlie.pk]), {"role": "operator"})
    charlie.refresh_from_db()
    assert role_of(get_user_model().objects.get(pk=charlie.pk)) == "operator"
    assert list(charlie.groups.values_list("name", flat=True)) == ["operator"]


def test_a_deactivated_user_loses_the_session_and_the_api_token(alice, bob):
    from rest_framework.test import APIClient

    from panel.accounts.models import ApiToken

    session = signed_in(bob)
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {ApiToken.issue(bob, 'script')[1]}")
    assert session.get(reverse("nodes:list")).status_code == 200
    assert api.get("/api/v1/nodes/").status_code == 200
    signed_in(alice).post(reverse("accounts:user-active", args=[bob.pk]), {"active": "0"})
    assert session.get(reverse("nodes:list")).status_code == 302
    assert api.get("/api/v1/nodes/").status_code in (401, 403)
    signed_in(alice).post(reverse("accounts:user-active", args=[bob.pk]), {"active": "1"})
    assert api.get("/api/v1/nodes/").status_code == 200


def test_the_last_admin_can_be_neither_demoted_nor_deactivated(alice, bob):
    admin = signed_in(alice)
    page = admin.post(reverse("accounts:user-role", args=[alice.pk]), {"role": "viewer"}, follow=True)
    assert "alice is the only active admin" in page.content.decode()
    assert role_of(get_user_model().objects.get(pk=alice.pk)) == "admin"
    page = admin.post(reverse("accounts:user-active", args=[alice.pk]), {"active": "0"}, follow=True)
    assert "You cannot deactivate yourself" in page.content.decode()
    admin.post(reverse("accounts:user-role", args=[bob.pk]), {"role": "admin"})
    admin.post(reverse("accounts:user-role", args=[alice.pk]), {"role": "operator"})
    assert role_of(get_user_model().objects.get(pk=alice.pk)) == "operator"


def test_a_password_reset_replaces_the_old_one(alice, charlie):
    page = signed_in(alice).post(reverse("accounts:user-password", args=[charlie.pk]), follow=True)
    password = page.context["handover"]["password"]
    assert not Client().login(username="charlie", password="charlie-password")
    assert Client().login(username="charlie", password=password)


@pytest.mark.parametrize("who", ["bob", "charlie"])
def test_only_admins_reach_the_users_pages(who, world):
    client = signed_in(world[who])
    target = world["charlie"]
    assert client.get(reverse("accounts:users")).status_code == 403
    assert client.post(reverse("accounts:users"), {"username": "x", "role": "admin"}).status_code == 403
    for name in ("accounts:user-role", "accounts:user-active", "accounts:user-password"):
        assert (
            client.post(reverse(name, args=[target.pk]), {"role": "admin", "active": "0"}).status_code == 403
        )
    assert role_of(get_user_model().objects.get(pk=target.pk)) == "viewer"
    assert not get_user_model().objects.filter(username="x").exists()


def test_the_sidebar_links_the_panels_users_page_not_djangos_admin(alice, bob):
    page = signed_in(alice).get(reverse("core:dashboard")).content.decode()
    assert f'href="{reverse("accounts:users")}"' in page
    assert 'href="/admin/"' not in page
    assert reverse("accounts:users") not in signed_in(bob).get(reverse("core:dashboard")).content.decode()


def test_a_user_changes_the_temporary_password_on_the_settings_page(charlie):
    client = signed_in(charlie)
    page = client.get(reverse("accounts:settings")).content.decode()
    assert 'data-testid="password-form"' in page
    wrong = client.post(
        reverse("accounts:change-password"),
        {"old_password": "nope", "new_password1": "Ascend-910B-x", "new_password2": "Ascend-910B-x"},
    )
    assert wrong.status_code == 200
    assert "Your old password was entered incorrectly" in wrong.content.decode()
    client.post(
        reverse("accounts:change-password"),
        {
            "old_password": "charlie-password",
            "new_password1": "Ascend-910B-x",
            "new_password2": "Ascend-910B-x",
        },
    )
    assert client.get(reverse("accounts:settings")).status_code == 200  # still signed in
    assert Client().login(username="charlie", password="Ascend-910B-x")
