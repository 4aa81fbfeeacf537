"""Password guessing, written as the attack: the sign-in page, Django's admin and HTTP Basic on the API lock
a user name tried from one address after PANEL_SIGNIN_FAILURE_LIMIT failures for the cool-off; the API
throttles floods; Basic auth is off unless PANEL_API_BASIC_AUTH; a weak PANEL_ADMIN_PASSWORD is refused."""

import base64
from datetime import timedelta

import pytest
import time_machine
from django.core.management import CommandError, call_command
from django.test import Client
from django.utils import timezone
from rest_framework.test import APIClient

from panel.audit import actions
from panel.audit.models import AuditEntry

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _limits(settings):
    settings.AXES_FAILURE_LIMIT = 3
    settings.AXES_COOLOFF_TIME = timedelta(minutes=15)


def guess(client, password, username="alice", url="/accounts/login/"):
    return client.post(url, {"username": username, "password": password})


def test_repeated_wrong_passwords_lock_the_user_at_that_address_even_with_the_right_one(alice):
    attacker = Client(REMOTE_ADDR="203.0.113.7")
    for attempt in range(3):
        assert guess(attacker, f"guess-{attempt}").status_code in (200, 429)
    response = guess(attacker, "alice-password")
    assert response.status_code == 429
    page = response.content.decode()
    assert "Too many failed sign-ins for this user from your address" in page
    assert "Try again in 15 minutes" in page
    assert "_auth_user_id" not in attacker.session
    assert AuditEntry.objects.filter(action=actions.SIGNIN_LOCKED_OUT, target="alice").exists()


def test_the_real_user_at_another_address_still_signs_in(alice):
    attacker = Client(REMOTE_ADDR="203.0.113.7")
    for attempt in range(4):
        guess(attacker, f"guess-{attempt}")
    office = Client(REMOTE_ADDR="198.51.100.20")
    assert guess(office, "alice-password").status_code == 302
    assert office.session["_auth_user_id"] == str(alice.pk)


def test_the_lock_lifts_after_the_cool_off(alice):
    attacker = Client(REMOTE_ADDR="203.0.113.7")
    for attempt in range(3):
        guess(attacker, f"guess-{attempt}")
    assert guess(attacker, "alice-password").status_code == 429
    with time_machine.travel(timezone.now() + timedelta(minutes=16)):
        assert guess(attacker, "alice-password").status_code == 302


def test_the_lockout_message_is_in_chinese_for_chinese_readers(alice):
    attacker = Client(REMOTE_ADDR="203.0.113.7", HTTP_ACCEPT_LANGUAGE="zh-hans")
    for attempt in range(3):
        guess(attacker, f"guess-{attempt}")
    page = guess(attacker, "alice-password").content.decode()
    assert "登录失败次数过多" in page


def test_django_admin_sign_in_is_locked_the_same_way(alice):
    alice.is_staff = True
    alice.save()
    attacker = Client(REMOTE_ADDR="203.0.113.8")
    for attempt in range(3):
        guess(attacker, f"guess-{attempt}", url="/admin/login/")
    response = guess(attacker, "alice-password", url="/admin/login/")
    assert response.status_code == 429
    assert "_auth_user_id" not in attacker.session


def basic(username, password) -> str:
    return "Basic " + base64.b64encode(f"{username}:{password}".encode()).decode()


def test_basic_auth_guessing_on_the_api_is_locked_too(settings, alice):
    settings.PANEL_API_BASIC_AUTH = True
    attacker = APIClient(REMOTE_ADDR="203.0.113.9")
    for attempt in range(3):
        response = attacker.get("/api/v1/nodes/", HTTP_AUTHORIZATION=basic("alice", f"guess-{attempt}"))
        assert response.status_code == 401
    response = attacker.get("/api/v1/nodes/", HTTP_AUTHORIZATION=basic("alice", "alice-password"))
    assert response.status_code in (401, 429)
    assert "results" not in response.json()
    failed = AuditEntry.objects.filter(action=actions.SIGNIN_FAILED, target="alice")
    assert failed.count() >= 3
    assert set(failed.values_list("ip", flat=True)) == {"203.0.113.9"}


def test_basic_auth_is_refused_when_turned_off_as_in_production(settings, alice):
    settings.PANEL_API_BASIC_AUTH = False
    response = APIClient().get("/api/v1/nodes/", HTTP_AUTHORIZATION=basic("alice", "alice-password"))
    assert response.status_code == 401
    settings.PANEL_API_BASIC_AUTH = True
    response = APIClient().get("/api/v1/nodes/", HTTP_AUTHORIZATION=basic("alice", "alice-password"))
    assert response.status_code == 200


def test_a_forged_x_forwarded_for_does_not_give_a_fresh_address_per_guess(settings, alice):
    settings.PANEL_TRUSTED_PROXIES = 1  # one proxy in front: it appends the address it saw, last
    for attempt in range(4):
        forged = f"10.9.9.{attempt}, 203.0.113.10"
        guess(Client(REMOTE_ADDR="127.0.0.1", HTTP_X_FORWARDED_FOR=forged), f"guess-{attempt}")
    proxied = Client(REMOTE_ADDR="127.0.0.1", HTTP_X_FORWARDED_FOR="10.1.1.1, 203.0.113.10")
    response = guess(proxied, "alice-password")
    assert response.status_code == 429
    entry = AuditEntry.objects.filter(action=actions.SIGNIN_FAILED).first()
    assert entry.ip == "203.0.113.10"


def test_sign_ins_are_audited_with_their_address(alice):
    client = Client(REMOTE_ADDR="198.51.100.5")
    guess(client, "wrong")
    guess(client, "alice-password")
    entries = list(AuditEntry.objects.order_by("pk").values_list("action", "actor_name", "ip"))
    assert entries == [
        (actions.SIGNIN_FAILED, "alice", "198.51.100.5"),
        (actions.SIGNIN_SUCCEEDED, "alice", "198.51.100.5"),
    ]
    assert AuditEntry.objects.get(action=actions.SIGNIN_SUCCEEDED).actor == alice


def test_an_anonymous_flood_of_the_api_is_throttled(settings, world):
    settings.PANEL_API_THROTTLE_ANON = "3/min"
    client = APIClient(REMOTE_ADDR="203.0.113.11")
    codes = [client.get("/api/v1/nodes/").status_code for _ in range(4)]
    assert codes[:3] == [401, 401, 401]
    assert codes[3] == 429


def test_a_signed_in_users_flood_is_throttled_per_user(settings, bob, charlie):
    settings.PANEL_API_THROTTLE_USER = "2/min"
    from tests.conftest import api_client_for

    flooder = api_client_for(bob)
    assert [flooder.get("/api/v1/nodes/").status_code for _ in range(3)] == [200, 200, 429]
    assert api_client_for(charlie).get("/api/v1/nodes/").status_code == 200  # others are not punished


def test_a_weak_panel_admin_password_is_refused_naming_the_variable(settings):
    settings.PANEL_ADMIN_PASSWORD = "12345678"
    with pytest.raises(CommandError) as error:
        call_command("ensure_admin")
    assert "PANEL_ADMIN_PASSWORD" in str(error.value)
    assert "too common" in str(error.value) or "entirely numeric" in str(error.value)
    from django.contrib.auth import get_user_model

    assert not get_user_model().objects.filter(username="admin").exists()


def test_a_strong_panel_admin_password_creates_the_admin(settings):
    settings.PANEL_ADMIN_PASSWORD = "correct horse battery staple 42"
    call_command("ensure_admin")
    from django.contrib.auth import get_user_model

    assert get_user_model().objects.get(username="admin").check_password("correct horse battery staple 42")
