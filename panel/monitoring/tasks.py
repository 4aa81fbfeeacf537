"""Panel tasks of monitoring: the minute downsampler, pruning and SSH nodes' probes (beat) and the alert
webhook (with retries, never in the ingest path), all on the panel queue (the default). Metrics themselves
do not come as tasks: every panel worker drains the metrics inbox in a thread (panel.monitoring.inbox),
registered here."""

import logging
from datetime import UTC, datetime, timedelta

import httpx

from panel.core.panel_tasks import panel_task
from panel.monitoring import ssh_probes
from panel.monitoring.history import downsample_all
from panel.monitoring.inbox import MetricsIngestStep
from panel.monitoring.models import Alert, HostMetricMinute, NpuMetricMinute
from panel.monitoring.rollup import roll_up
from workers.celery_app import app

log = logging.getLogger(__name__)

WEBHOOK_TIMEOUT_S = 10
WEBHOOK_RETRIES = 5


app.steps["worker"].add(MetricsIngestStep)


@panel_task("panel.monitoring.downsample")
def downsample() -> int:
    """Write every complete minute in the ring buffers to the minute tables. Returns rows written."""
    return downsample_all()


@panel_task("panel.monitoring.prune")
def prune() -> int:
    """Fold minute rows older than PANEL_METRICS_MINUTE_DAYS into hourly rows (panel.monitoring.rollup), then
    delete rows older than PANEL_METRICS_RETENTION_DAYS and resolved alerts as old. Returns rows removed."""
    from django.conf import settings

    deleted = roll_up()
    cutoff = datetime.now(UTC) - timedelta(days=settings.PANEL_METRICS_RETENTION_DAYS)
    deleted += NpuMetricMinute.objects.filter(minute__lt=cutoff).delete()[0]
    deleted += HostMetricMinute.objects.filter(minute__lt=cutoff).delete()[0]
    deleted += Alert.objects.filter(resolved_at__lt=cutoff).delete()[0]
    return deleted


@panel_task(
    "panel.monitoring.send_alert_webhook",
    bind=True,
    max_retries=WEBHOOK_RETRIES,
    acks_late=False,
)
def send_alert_webhook(self, payload: dict) -> int:
    """POST the alert as JSON to PANEL_ALERT_WEBHOOK_URL; transient failures retry with back-off."""
    from django.conf import settings

    url = settings.PANEL_ALERT_WEBHOOK_URL
    if not url:
        return 0
    try:
        response = httpx.post(url, json=payload, timeout=WEBHOOK_TIMEOUT_S)
        response.raise_for_status()
    except httpx.HTTPStatusError as error:
        if error.response.status_code < 500:  # the receiver refused it: retrying will not help
            log.error("alert webhook %s refused the alert (%s); not retried", url, error.response.status_code)
            return error.response.status_code
        return _retry(self, url, error)
    except httpx.HTTPError as error:
        return _retry(self, url, error)
    return response.status_code


def _retry(task, url: str, error: Exception) -> int:
    if task.request.retries >= WEBHOOK_RETRIES:
        log.error("alert webhook %s failed %d times, giving up: %s", url, WEBHOOK_RETRIES + 1, error)
        return 0
    log.warning("alert webhook %s failed (%s); retrying", url, error)
    raise task.retry(exc=error, countdown=2 ** (task.request.retries + 1))


@panel_task("panel.dispatch_ssh_probes", acks_late=False)
def dispatch_ssh_probes() -> list[str]:
    return ssh_probes.dispatch_ssh_probes()
