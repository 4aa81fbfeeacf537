"""Which channels an alert goes to (routes), holding sends while a silence matches, and the delivery task:
every attempt a Delivery row, transient failures retried with back-off on the panel queue, refusals (a
4xx, a bot's error code) not. The env-var webhook (panel.monitoring.alerting.webhooks) is separate and
unchanged."""

import logging

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from panel.core.infra.panel_tasks import panel_task
from panel.monitoring.alerting.alert_shape import alert_data
from panel.monitoring.models import (
    Alert,
    Delivery,
    DeliveryStatus,
    NotificationChannel,
    Route,
    Silence,
)
from panel.monitoring.notifications import channels
from panel.nodes.models import Node

log = logging.getLogger(__name__)

RETRIES = 5
HOLD_RECHECK_S = 300  # a held send looks again at least this often (a silence may be ended early)


def route_matches(route: Route, alert: Alert, labels: dict) -> bool:
    """`labels`: the alert's node's labels ({} for a deployment's alert)."""
    if route.severities and alert.severity not in route.severities:
        return False
    if route.kinds and alert.kind not in route.kinds:
        return False
    if route.node_label:
        key, _, value = route.node_label.partition("=")
        if not alert.node_id or str(labels.get(key.strip())) != value.strip():
            return False
    return True


def channels_for(alerts: list[Alert]) -> dict[int, list[int]]:
    """{alert pk: ids of the enabled channels whose enabled routes match it}, in a query or two for however
    many alerts (a site's switch coming back resolves hundreds at once)."""
    routes = list(Route.objects.filter(enabled=True, channel__enabled=True).order_by("pk"))
    if not routes:
        return {}
    labels: dict[int, dict] = {}
    if any(route.node_label for route in routes):
        node_ids = {alert.node_id for alert in alerts if alert.node_id is not None}
        labels = dict(Node.objects.filter(pk__in=node_ids).values_list("pk", "labels"))

    def labels_of(alert: Alert) -> dict:
        return (labels.get(alert.node_id) if alert.node_id is not None else None) or {}

    return {
        alert.pk: sorted({r.channel_id for r in routes if route_matches(r, alert, labels_of(alert))})
        for alert in alerts
    }


def silence_for(alert: Alert, now) -> Silence | None:
    """The active silence (ending last) that matches `alert`, if any."""
    for silence in Silence.objects.active(now).order_by("-ends_at"):
        if silence.kinds and alert.kind not in silence.kinds:
            continue
        if silence.node and (alert.node is None or alert.node.name != silence.node):
            continue
        if silence.deployment and alert.deployment != silence.deployment:
            continue
        return silence
    return None


def dispatch(changes: list[tuple[str, Alert]]) -> None:
    """Queue one delivery per matching channel for each (event, alert), after the change committed."""
    targets = channels_for([alert for _, alert in changes])
    for event, alert in changes:
        for channel_id in targets.get(alert.pk, []):
            try:
                deliver.delay(channel_id, alert.pk, event)
            except Exception:  # a broker hiccup must not fail the ingest path; the alert stays on the page
                log.exception("notification of alert %s to channel %s not queued", alert.pk, channel_id)


def payload_of(alert: Alert | None, event: str) -> dict:
    return {"event": event, "alert": alert_data(alert, alert.subject) if alert else None}


def attempt(
    channel: NotificationChannel, alert: Alert | None, event: str, number: int
) -> tuple[Delivery, channels.SendFailed | None]:
    """Send once and record it. The Delivery's status is SENT or FAILED (then with the send's error); the
    caller decides on retrying."""
    try:
        code = channels.send(channel, payload_of(alert, event))
    except channels.SendFailed as error:
        delivery = Delivery.objects.create(
            channel=channel,
            alert=alert,
            event=event,
            attempt=number,
            status=DeliveryStatus.FAILED,
            response_code=error.code,
            error=str(error)[:2000],
        )
        return delivery, error
    sent = Delivery.objects.create(
        channel=channel,
        alert=alert,
        event=event,
        attempt=number,
        status=DeliveryStatus.SENT,
        response_code=code,
    )
    return sent, None


def send_test(channel: NotificationChannel) -> Delivery:
    """The Test button: one attempt now, recorded, never retried (the admin sees the outcome at once)."""
    return attempt(channel, None, "test", 1)[0]


@panel_task("panel.monitoring.deliver_notification", bind=True, max_retries=RETRIES, acks_late=False)
def deliver(self, channel_id: int, alert_id: int, event: str, held: bool = False) -> str:
    channel = NotificationChannel.objects.filter(pk=channel_id, enabled=True).first()
    alert = Alert.objects.select_related("node").filter(pk=alert_id).first()
    if channel is None or alert is None:
        return "gone"
    now = timezone.now()
    silence = silence_for(alert, now)
    if silence is not None:
        if not held:
            Delivery.objects.create(
                channel=channel,
                alert=alert,
                event=event,
                attempt=0,
                status=DeliveryStatus.HELD,
                error=f"silenced until {silence.ends_at.isoformat()}: {silence.reason}"[:2000],
            )
        wait = min(HOLD_RECHECK_S, max(1.0, (silence.ends_at - now).total_seconds()))
        transaction.on_commit(
            lambda: deliver.apply_async((channel_id, alert_id, event, True), countdown=wait)
        )
        return "held"
    number = self.request.retries + 1
    delivery, failure = attempt(channel, alert, event, number)
    if failure is None:
        return "sent"
    if failure.permanent or self.request.retries >= RETRIES:
        log.error("notification to %s failed for good (attempt %d): %s", channel.name, number, failure)
        return "failed"
    Delivery.objects.filter(pk=delivery.pk).update(status=DeliveryStatus.RETRYING)
    base = settings.PANEL_NOTIFY_RETRY_BASE_S
    raise self.retry(exc=failure, countdown=base * 2**self.request.retries)
