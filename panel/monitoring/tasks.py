"""Panel tasks of monitoring: the minute downsampler, pruning and SSH nodes' probes (beat) and the alert
webhook (panel.monitoring.alerting.webhooks, imported here so the worker has it), all on the panel queue (the
default). Metrics themselves do not come as tasks: every panel worker drains the metrics inbox in a thread
(panel.monitoring.metrics.inbox), registered here."""

from datetime import UTC, datetime, timedelta

from panel.core.infra.panel_tasks import panel_task
from panel.monitoring.alerting.webhooks import send_alert_webhook  # noqa: F401  registered with the worker
from panel.monitoring.metrics import ssh_probes
from panel.monitoring.metrics.history import downsample_all
from panel.monitoring.metrics.inbox import MetricsIngestStep
from panel.monitoring.metrics.rollup import roll_up
from panel.monitoring.models import Alert, HostMetricMinute, NpuMetricMinute
from panel.monitoring.notifications.notify import deliver  # noqa: F401  registered with the worker
from workers.celery_app import app

app.steps["worker"].add(MetricsIngestStep)


@panel_task("panel.monitoring.downsample")
def downsample() -> int:
    """Write every complete minute in the ring buffers to the minute tables. Returns rows written."""
    return downsample_all()


@panel_task("panel.monitoring.prune")
def prune() -> int:
    """Fold minute rows older than PANEL_METRICS_MINUTE_DAYS into hourly rows
    (panel.monitoring.metrics.rollup), then delete rows older than PANEL_METRICS_RETENTION_DAYS and resolved
    alerts as old. Returns rows removed."""
    from django.conf import settings

    deleted = roll_up()
    cutoff = datetime.now(UTC) - timedelta(days=settings.PANEL_METRICS_RETENTION_DAYS)
    deleted += NpuMetricMinute.objects.filter(minute__lt=cutoff).delete()[0]
    deleted += HostMetricMinute.objects.filter(minute__lt=cutoff).delete()[0]
    deleted += Alert.objects.filter(resolved_at__lt=cutoff).delete()[0]
    return deleted


@panel_task("panel.dispatch_ssh_probes", acks_late=False)
def dispatch_ssh_probes() -> list[str]:
    return ssh_probes.dispatch_ssh_probes()
