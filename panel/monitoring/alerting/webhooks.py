"""The alert webhook: each alert raised or resolved is POSTed to PANEL_ALERT_WEBHOOK_URL by a panel task
(with retries, never in the ingest path). Its own module, below alerts (which queues it) and beside
monitoring.tasks (which imports it so the worker has it), so the ingest path and the tasks do not import
each other."""

import logging

import httpx
from django.conf import settings

from panel.core.infra.panel_tasks import panel_task

log = logging.getLogger(__name__)

WEBHOOK_TIMEOUT_S = 10
WEBHOOK_RETRIES = 5


@panel_task(
    "panel.monitoring.send_alert_webhook",
    bind=True,
    max_retries=WEBHOOK_RETRIES,
    acks_late=False,
)
def send_alert_webhook(self, payload: dict) -> int:
    """POST the alert as JSON to PANEL_ALERT_WEBHOOK_URL; transient failures retry with back-off."""
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
