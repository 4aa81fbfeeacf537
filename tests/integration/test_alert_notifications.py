"""A deployment that crash-loops to Failed raises an alert that reaches the channels its routes choose: a
real SMTP server (with a login, the sealed password) and a local receiver of each bot's format checking
the signing as the vendor documents it. A route that does not match sends nothing; a silence holds a send
until it ends; a 500 is retried, a 400 is not. Channels are made through the API, as an admin would."""

import time
from datetime import timedelta

import pytest
from django.db import transaction
from django.utils import timezone

from panel.core.domain.choices import DeploymentState
from panel.monitoring.models import Alert, Delivery, DeliveryStatus, NotificationChannel
from tests.conftest import api_client_for
from tests.deployment_helpers import wait_for
from tests.notify_receivers import Mailbox, Receiver

pytestmark = pytest.mark.django_db(transaction=True)

BOT_SECRET = "SECa1b2c3d4e5f6"


@pytest.fixture
def fast_retries(settings):
    settings.PANEL_NOTIFY_RETRY_BASE_S = 0.2
    settings.PANEL_DEPLOY_MAX_RESTARTS = 2


@pytest.fixture
def receivers():
    made: list = []

    def make(kind, secret="", statuses=()):
        receiver = Receiver(kind, secret, statuses)
        made.append(receiver)
        return receiver

    yield make
    for receiver in made:
        receiver.close()


@pytest.fixture
def mailbox():
    box = Mailbox("alerts@site.example", "smtp-pass")
    yield box
    box.close()


def channel(admin, name, kind, url="", secret=None, **fields):
    body = {"name": name, "kind": kind, "url": url, **fields}
    if secret is not None:
        body["secret"] = secret
    answer = api_client_for(admin).post("/api/v1/notification-channels/", body, format="json")
    assert answer.status_code == 201, answer.content
    assert "secret" not in answer.json()
    return answer.json()


def route(admin, name, channel_name, **fields):
    answer = api_client_for(admin).post(
        "/api/v1/notification-routes/", {"name": name, "channel": channel_name, **fields}, format="json"
    )
    assert answer.status_code == 201, answer.content


def crash_loop_to_failed(name="qwen-chat"):
    """The reconcile loop's own decisions on launches that keep failing, until it gives up."""
    from panel.catalog.models import Model
    from panel.deployments import services
    from panel.deployments.models import Deployment
    from panel.deployments.rollouts.reconcile import Policy, schedule_restart

    deployment = Deployment.objects.create(name=name, model=Model.objects.create(name=f"m-{name}"))
    policy = Policy.from_settings()
    while deployment.observed_state != DeploymentState.FAILED:
        with transaction.atomic():
            services.move(deployment, DeploymentState.STARTING, "Starting again.")
            deployment.save()
        with transaction.atomic():
            schedule_restart(deployment, policy, "The engine process exited.", timezone.now())
            deployment.save()
    return deployment


def deliveries(**filters):
    return list(Delivery.objects.filter(**filters).order_by("pk"))


def test_a_crash_loop_to_failed_reaches_email_and_every_bot(
    celery_worker, alice, fast_retries, receivers, mailbox
):
    bots = {
        "dingtalk": receivers("dingtalk", BOT_SECRET),
        "feishu": receivers("feishu", BOT_SECRET),
        "wecom": receivers("wecom", "wecom-key-1"),
        "webhook": receivers("webhook", "hook-token"),
    }
    for kind, receiver in bots.items():
        secret = None if kind == "wecom" else receiver.secret
        channel(alice, f"to-{kind}", kind, receiver.url(), secret)
        route(alice, f"failed-to-{kind}", f"to-{kind}", kinds=["deployment_failed"])
    channel(
        alice, "to-mail", "email", secret="smtp-pass", smtp_host="127.0.0.1", smtp_port=mailbox.port,
        smtp_security="none", smtp_user="alerts@site.example", email_from="panel@site.example",
        email_to="ops@site.example, sre@site.example",
    )  # fmt: skip
    route(alice, "critical-to-mail", "to-mail", severities=["critical"], kinds=["deployment_failed"])
    assert NotificationChannel.objects.get(name="to-mail").secret != "smtp-pass"  # sealed at rest

    crash_loop_to_failed()

    alert = Alert.objects.get(deployment="qwen-chat", kind="deployment_failed")
    assert alert.node is None
    assert alert.resolved_at is None
    assert Alert.objects.open().filter(deployment="qwen-chat", kind="deployment_crash_loop").exists()
    for kind, receiver in bots.items():
        wait_for(lambda r=receiver: r.taken(), 30, f"the {kind} receiver to take the alert")
    wait_for(lambda: mailbox.messages, 30, "the mail")
    for kind, receiver in bots.items():
        assert len(receiver.received) == 1, (kind, receiver.received)  # only the routed kind, once
        assert "qwen-chat" in str(receiver.taken()[0]["body"])
    assert mailbox.logins == ["alerts@site.example"]
    assert sorted(mailbox.messages[0]["to"]) == ["ops@site.example", "sre@site.example"]
    assert "qwen-chat" in mailbox.messages[0]["data"]
    sent = deliveries(alert=alert)
    assert sorted(d.channel.name for d in sent) == sorted([f"to-{k}" for k in bots] + ["to-mail"])
    assert {d.status for d in sent} == {DeliveryStatus.SENT}


def test_a_route_that_does_not_match_sends_nothing(celery_worker, alice, fast_retries, receivers):
    witness, other = receivers("webhook"), receivers("webhook")
    channel(alice, "witness", "webhook", witness.url())
    channel(alice, "other", "webhook", other.url())
    route(alice, "all-failures", "witness", kinds=["deployment_failed"])
    route(alice, "hot-npus", "other", kinds=["npu_temperature"])
    route(alice, "labelled-nodes", "other", node_label="site=beijing")  # deployment alerts have no node

    crash_loop_to_failed()

    wait_for(lambda: witness.taken(), 30, "the witness to take the alert")
    time.sleep(1)  # the other routes' sends, had there been any, were queued with the witness's
    assert other.received == []
    assert deliveries(channel__name="other") == []


def test_a_silence_holds_a_send_until_it_ends(celery_worker, alice, fast_retries, receivers):
    receiver = receivers("webhook")
    channel(alice, "hook", "webhook", receiver.url())
    route(alice, "failures", "hook", kinds=["deployment_failed"])
    ends = timezone.now() + timedelta(seconds=4)
    answer = api_client_for(alice).post(
        "/api/v1/silences/",
        {
            "kinds": ["deployment_failed"],
            "deployment": "qwen-chat",
            "ends_at": ends.isoformat(),
            "reason": "maint",
        },
        format="json",
    )
    assert answer.status_code == 201, answer.content
    assert answer.json()["created_by"] == "alice"

    crash_loop_to_failed()

    wait_for(lambda: deliveries(status=DeliveryStatus.HELD), 30, "the held delivery")
    assert receiver.received == []
    wait_for(lambda: receiver.taken(), 30, "the send once the silence ended")
    assert receiver.taken()[0]["time"] >= ends.timestamp()
    assert [d.status for d in deliveries(channel__name="hook")] == [DeliveryStatus.HELD, DeliveryStatus.SENT]


def test_a_500_is_retried_and_a_400_is_not(celery_worker, alice, fast_retries, receivers):
    flaky, refusing = receivers("webhook", statuses=(500,)), receivers("webhook", statuses=(400, 400))
    channel(alice, "flaky", "webhook", flaky.url())
    channel(alice, "refusing", "webhook", refusing.url())
    route(alice, "to-flaky", "flaky", kinds=["deployment_failed"])
    route(alice, "to-refusing", "refusing", kinds=["deployment_failed"])

    crash_loop_to_failed()

    wait_for(lambda: flaky.taken(), 30, "the retried send")
    attempts = deliveries(channel__name="flaky")
    assert [(d.attempt, d.status, d.response_code) for d in attempts] == [
        (1, DeliveryStatus.RETRYING, 500),
        (2, DeliveryStatus.SENT, 200),
    ]
    time.sleep(2)  # longer than a retry's back-off here (0.2 s, then 0.4 s)
    assert [(d.attempt, d.status, d.response_code) for d in deliveries(channel__name="refusing")] == [
        (1, DeliveryStatus.FAILED, 400)
    ]
    assert len(refusing.received) == 1


def test_the_test_button_sends_now_and_records_it(alice, receivers):
    receiver = receivers("feishu", BOT_SECRET)
    made = channel(alice, "lark", "feishu", receiver.url(), BOT_SECRET)
    answer = api_client_for(alice).post(f"/api/v1/notification-channels/{made['id']}/test/")
    assert answer.status_code == 201, answer.content
    assert answer.json()["status"] == "sent"
    assert answer.json()["event"] == "test"
    assert len(receiver.taken()) == 1

    wrong = channel(alice, "lark-wrong", "feishu", receiver.url(), "not-the-secret")
    answer = api_client_for(alice).post(f"/api/v1/notification-channels/{wrong['id']}/test/")
    assert answer.json()["status"] == "failed"
    assert "19021" in answer.json()["error"]


def test_only_admins_see_or_change_channels_and_no_one_reads_a_secret(alice, bob, charlie, receivers):
    made = channel(alice, "hook", "webhook", "http://127.0.0.1:9/x", "token-1")
    assert made["has_secret"] is True
    for user in (bob, charlie):
        client = api_client_for(user)
        assert client.get("/api/v1/notification-channels/").status_code == 403
        assert client.get(f"/api/v1/notification-channels/{made['id']}/").status_code == 403
        answer = client.post(
            "/api/v1/notification-channels/", {"name": "x", "kind": "webhook", "url": "http://h/"}
        )
        assert answer.status_code == 403
        assert client.post(f"/api/v1/notification-channels/{made['id']}/test/").status_code == 403
        assert client.get("/api/v1/deliveries/").status_code == 403
        assert client.get("/api/v1/notification-routes/").status_code == 200  # routes are readable
        assert client.post("/api/v1/silences/", {}, format="json").status_code == 403
    seen = api_client_for(alice).get(f"/api/v1/notification-channels/{made['id']}/").json()
    assert "secret" not in seen
    assert "token-1" not in str(seen)
    kept = api_client_for(alice).patch(
        f"/api/v1/notification-channels/{made['id']}/", {"enabled": False}, format="json"
    )
    assert kept.status_code == 200
    assert kept.json()["has_secret"] is True
