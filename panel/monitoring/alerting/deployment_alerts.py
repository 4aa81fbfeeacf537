"""Alerts about what serves: raised from a deployment's observed state (the `deployment_observed` event
deployments sends after each change commits) and resolved when the state no longer shows the condition.
Such an alert has no node; its subject is the deployment's name."""

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from panel.monitoring.alerting.alerts import announce_all
from panel.monitoring.models import Alert, AlertKind, AlertSeverity

CRASH_LOOP_RESTARTS = 2  # the default of PANEL_ALERT_CRASH_LOOP_RESTARTS


def conditions(snapshot: dict, crash_loop_restarts: int = CRASH_LOOP_RESTARTS) -> dict[str, dict]:
    """{alert key: fields} for every condition the deployment's snapshot shows. Nothing while it is
    meant to be stopped: a stopped deployment serving nothing is what was asked for."""
    if snapshot.get("gone") or snapshot.get("desired_state") == "stopped":
        return {}
    name, state, reason = snapshot["name"], snapshot.get("observed_state"), snapshot.get("reason") or ""
    found: dict[str, dict] = {}

    def add(kind, severity, message: str) -> None:  # choices members (untyped: Django ships no stubs)
        found[kind] = {"kind": kind, "severity": severity, "message": message}

    if state == "failed":
        add(
            AlertKind.DEPLOYMENT_FAILED,
            AlertSeverity.CRITICAL,
            f"Deployment {name} failed: {reason}".rstrip(": "),
        )
    elif state == "unhealthy":
        add(
            AlertKind.DEPLOYMENT_UNHEALTHY,
            AlertSeverity.WARNING,
            f"Deployment {name} is unhealthy: {reason}".rstrip(": "),
        )
    restarts = snapshot.get("failed_restarts") or 0
    if restarts >= crash_loop_restarts:
        add(
            AlertKind.DEPLOYMENT_CRASH_LOOP,
            AlertSeverity.CRITICAL,
            f"Deployment {name} is crash-looping: {restarts} failed restarts in a row",
        )
    wanted, serving = snapshot.get("replicas_wanted") or 0, snapshot.get("replicas_serving")
    if serving is not None and state not in ("pending", "starting") and serving < wanted:
        add(
            AlertKind.REPLICAS_BELOW_WANTED,
            AlertSeverity.WARNING,
            f"Deployment {name} serves with {serving} of {wanted} replicas",
        )
    if snapshot.get("rollout_failed"):
        add(AlertKind.ROLLOUT_FAILED, AlertSeverity.CRITICAL, f"The last rollout of {name} failed")
    return found


def observe(snapshot: dict) -> None:
    """Raise what the snapshot shows and is not open; resolve what is open and no longer shown."""
    current = conditions(snapshot, settings.PANEL_ALERT_CRASH_LOOP_RESTARTS)
    name, now = snapshot["name"], timezone.now()
    changed: list[tuple[str, Alert, str]] = []
    with transaction.atomic():
        open_alerts = {
            alert.key: alert
            for alert in Alert.objects.open().filter(node__isnull=True, deployment=name).select_for_update()
        }
        for key, fields in current.items():
            if key in open_alerts:
                continue
            try:
                with transaction.atomic():
                    alert = Alert.objects.create(
                        deployment=name, key=key, first_seen=now, last_seen=now, **fields
                    )
            except IntegrityError:  # raised by another worker a moment ago
                continue
            changed.append(("raised", alert, name))
        closing = [alert for key, alert in open_alerts.items() if key not in current]
        if closing:
            Alert.objects.filter(pk__in=[alert.pk for alert in closing]).update(
                resolved_at=now, last_seen=now
            )
            for alert in closing:
                alert.resolved_at = alert.last_seen = now
                changed.append(("resolved", alert, name))
        if changed:
            transaction.on_commit(lambda: announce_all(changed))
