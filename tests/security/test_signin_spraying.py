"""Password guessing beyond one address: one account sprayed from many addresses is refused everywhere past
PANEL_SIGNIN_ACCOUNT_FAILURE_LIMIT (other accounts are not), and a flood of failures across the panel
raises an alarm once a minute in the audit log and on /metrics."""

from datetime import UTC, datetime, timedelta

import pytest
import time_machine
from django.core.cache import cache
from django.test import Client
from prometheus_client.parser import text_string_to_metric_families

from panel.audit import actions
from panel.audit.models import AuditEntry

pytestmark = pytest.mark.django_db

# Inside one clock minute, so the per-minute count does not straddle two.
MOMENT = datetime(2026, 12, 4, 3, 0, 5, tzinfo=UTC)


@pytest.fixture(autouse=True)
def _limits(settings):
    settings.AXES_FAILURE_LIMIT = 3
    settings.AXES_COOLOFF_TIME = timedelta(minutes=15)
    settings.PANEL_SIGNIN_ACCOUNT_FAILURE_LIMIT = 6
    settings.PANEL_SIGNIN_ALARM_FAILURES_PER_MINUTE = 5
    cache.clear()
    with time_machine.travel(MOMENT, tick=False):
        yield


def guess(address, password, username="alice"):
    return Client(REMOTE_ADDR=address).post("/accounts/login/", {"username": username, "password": password})


def test_one_account_sprayed_from_many_addresses_is_refused_everywhere(alice, bob):
    for n in range(6):  # two guesses from each of three addresses: never three from one
        guess(f"203.0.113.{n // 2 + 1}", f"guess-{n}")

    refused = guess("198.51.100.20", "alice-password")  # even the right password, from a fresh address

    assert refused.status_code == 429
    assert "from several addresses" in refused.content.decode()
    locked = AuditEntry.objects.filter(action=actions.SIGNIN_LOCKED_OUT, target="alice").get()
    assert locked.details["scope"] == "account"
    assert guess("198.51.100.20", "bob-password", username="bob").status_code == 302  # others sign in


def test_the_account_limit_lifts_after_the_cool_off(alice):
    for n in range(6):
        guess(f"203.0.113.{n + 1}", f"guess-{n}")
    assert guess("198.51.100.20", "alice-password").status_code == 429
    with time_machine.travel(MOMENT + timedelta(minutes=16), tick=False):
        assert guess("198.51.100.20", "alice-password").status_code == 302


def test_a_flood_of_failures_across_accounts_raises_one_alarm_in_the_audit_log_and_on_metrics(alice, bob):
    for n in range(7):
        guess(f"203.0.113.{n + 1}", "wrong", username=("alice", "bob", "nobody")[n % 3])

    alarms = AuditEntry.objects.filter(action=actions.SIGNIN_FAILURE_ALARM)
    assert alarms.count() == 1
    assert (alarms.get().details["failures"], alarms.get().details["threshold"]) == (5, 5)
    families = {f.name: f for f in text_string_to_metric_families(Client().get("/metrics").content.decode())}
    assert families["panel_signin_failure_alarm"].samples[0].value == 1
    assert families["panel_signin_failures"].samples[0].value == 7


def test_no_alarm_below_the_threshold(alice):
    for n in range(4):
        guess(f"203.0.113.{n + 1}", "wrong")
    assert not AuditEntry.objects.filter(action=actions.SIGNIN_FAILURE_ALARM).exists()
    families = {f.name: f for f in text_string_to_metric_families(Client().get("/metrics").content.decode())}
    assert families["panel_signin_failure_alarm"].samples[0].value == 0
