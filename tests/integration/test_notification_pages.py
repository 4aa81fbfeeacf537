"""The notifications page: admins only; a channel added there is sealed and its Test button sends and
records a delivery; routes and silences are set there (with who set a silence)."""

from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from panel.monitoring.models import Delivery, NotificationChannel, Route, Silence
from tests.notify_receivers import Receiver

pytestmark = pytest.mark.django_db

PAGE = "/alerts/notifications/"


def client_for(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def receiver():
    made = Receiver("webhook", "page-token")
    yield made
    made.close()


def test_only_admins_reach_the_page_and_its_forms(bob, charlie):
    for user in (bob, charlie):
        client = client_for(user)
        assert client.get(PAGE).status_code == 403
        answer = client.post(
            f"{PAGE}channels/", {"name": "x", "kind": "webhook", "url": "http://127.0.0.1:9/"}
        )
        assert answer.status_code == 403
    assert not NotificationChannel.objects.exists()


def test_an_admin_adds_a_channel_tests_it_and_sees_the_delivery(alice, receiver):
    client = client_for(alice)
    answer = client.post(
        f"{PAGE}channels/",
        {"name": "hook", "kind": "webhook", "url": receiver.url(), "secret": "page-token"},
    )  # the e-mail fields are hidden, so not sent, for a webhook
    assert answer.status_code == 302, answer.content.decode()[:2000]
    channel = NotificationChannel.objects.get(name="hook")
    assert channel.secret
    assert "page-token" not in channel.secret
    page = client.get(PAGE).content.decode()
    assert "page-token" not in page
    assert '<a href="/alerts/notifications/" class="active" aria-current="page">' in page
    assert '<a href="/alerts/" class="active"' not in page  # the Alerts link is not the current one too

    client.post(f"{PAGE}channels/{channel.pk}/test/")
    assert len(receiver.taken()) == 1  # the bearer token, unsealed, was right
    delivery = Delivery.objects.get(channel=channel)
    assert (delivery.event, delivery.status, delivery.response_code) == ("test", "sent", 200)
    assert f'data-delivery="{delivery.pk}" data-status="sent"' in client.get(PAGE).content.decode()


def test_a_channel_without_what_its_kind_needs_is_refused(alice):
    answer = client_for(alice).post(
        f"{PAGE}channels/", {"name": "mail", "kind": "email", "smtp_port": 25, "smtp_security": "none"}
    )
    assert answer.status_code == 400
    assert "needs its SMTP host" in answer.content.decode()


def test_routes_and_silences_are_set_on_the_page(alice):
    client = client_for(alice)
    channel = NotificationChannel.objects.create(name="hook", kind="webhook", url="http://127.0.0.1:9/")
    answer = client.post(
        f"{PAGE}routes/",
        {"name": "crit", "channel": channel.pk, "severities": ["critical"], "kinds": ["deployment_failed"]},
    )
    assert answer.status_code == 302
    assert Route.objects.get(name="crit").kinds == ["deployment_failed"]
    ends = (timezone.localtime() + timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M")
    answer = client.post(f"{PAGE}silences/", {"deployment": "qwen", "ends_at": ends, "reason": "upgrade"})
    assert answer.status_code == 302
    silence = Silence.objects.get()
    assert silence.created_by == alice
    assert silence.reason == "upgrade"
    client.post(f"{PAGE}silences/{silence.pk}/end/")
    silence.refresh_from_db()
    assert silence.ends_at <= timezone.now()


def test_a_deployment_alert_shows_on_the_dashboard_and_the_deployments_page(charlie):
    from panel.catalog.models import Model
    from panel.deployments.models import Deployment
    from panel.monitoring.alerting import deployment_alerts

    Deployment.objects.create(name="qwen", model=Model.objects.create(name="m"), spec={"parts": []})
    deployment_alerts.observe(
        {"name": "qwen", "observed_state": "failed", "desired_state": "running", "reason": "Gave up.",
         "failed_restarts": 0, "replicas_wanted": 1, "replicas_serving": None, "rollout_failed": False}
    )  # fmt: skip
    client = client_for(charlie)
    dashboard = client.get("/").content.decode()
    assert 'data-testid="serving-alerts"' in dashboard
    assert "Deployment qwen failed: Gave up." in dashboard
    page = client.get("/deployments/qwen/").content.decode()
    assert 'data-testid="deployment-alerts"' in page
    assert "Deployment qwen failed: Gave up." in page

    deployment_alerts.observe({"name": "qwen", "gone": True})
    assert "Deployment qwen failed" not in client.get("/").content.decode()
