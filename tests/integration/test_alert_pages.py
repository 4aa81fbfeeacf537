"""Acknowledging an alert from a page returns to the page it came from, and only to a page of the panel."""

import pytest
from django.test import Client
from django.utils import timezone

from panel.monitoring.models import Alert
from panel.nodes.models import Node

pytestmark = pytest.mark.django_db


@pytest.fixture
def alert(db):
    now = timezone.now()
    node = Node.objects.create(name="alert-node")
    return Alert.objects.create(
        node=node,
        key="temp:0:0",
        kind="temperature",
        severity="warning",
        message="hot",
        first_seen=now,
        last_seen=now,
    )


def _acknowledge(user, alert, next_url):
    client = Client()
    client.force_login(user)
    return client.post(f"/alerts/{alert.pk}/acknowledge/", {"next": next_url})


def test_acknowledging_returns_to_the_panel_page_it_came_from(bob, alert):
    response = _acknowledge(bob, alert, "/nodes/alert-node/")
    assert response.status_code == 302
    assert response["Location"] == "/nodes/alert-node/"
    alert.refresh_from_db()
    assert alert.acknowledged_by == bob


@pytest.mark.parametrize(
    "elsewhere", ["https://evil.example/phish", "//evil.example/", "javascript:alert(1)"]
)
def test_acknowledging_never_redirects_to_another_site(bob, alert, elsewhere):
    response = _acknowledge(bob, alert, elsewhere)
    assert response.status_code == 302
    assert response["Location"] == "/alerts/"
