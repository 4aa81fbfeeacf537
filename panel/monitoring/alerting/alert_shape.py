"""An alert as the websocket, the webhooks and the notification channels carry it."""

from panel.monitoring.models import Alert


def alert_data(alert: Alert, node_name: str) -> dict:
    """`node_name`: the alert's subject (its node's name, or its deployment's for a deployment alert)."""
    return {
        "id": alert.pk,
        "node": node_name if alert.node_id else None,
        "deployment": alert.deployment or None,
        "key": alert.key,
        "kind": alert.kind,
        "severity": alert.severity,
        "npu_id": alert.npu_id,
        "chip_id": alert.chip_id,
        "message": alert.message,
        "first_seen": alert.first_seen.isoformat(),
        "last_seen": alert.last_seen.isoformat(),
        "acknowledged_by": alert.acknowledged_by.username if alert.acknowledged_by is not None else None,
        "acknowledged_at": alert.acknowledged_at.isoformat() if alert.acknowledged_at else None,
        "resolved_at": alert.resolved_at.isoformat() if alert.resolved_at else None,
    }
