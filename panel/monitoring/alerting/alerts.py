"""Alerts: which conditions a metrics message shows, and keeping Alert rows in step with them.

The ingest path compares the conditions of each sample with the node's open alert keys in Redis and
touches the database only when the two differ, so a steady fleet costs no queries here."""

import logging

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from panel.monitoring.alerting.alert_shape import alert_data
from panel.monitoring.alerting.webhooks import send_alert_webhook
from panel.monitoring.metrics import store
from panel.monitoring.models import Alert, AlertKind, AlertSeverity
from panel.monitoring.notifications import notify
from panel.realtime.broadcast import ALERTS, broadcast_each, node_group

log = logging.getLogger(__name__)

HEALTH_SEVERITY = {
    "Warning": AlertSeverity.WARNING,
    "Alarm": AlertSeverity.CRITICAL,
    "Critical": AlertSeverity.CRITICAL,
}
OFFLINE_KEY = AlertKind.AGENT_OFFLINE.value
# Keys that samples do not decide: the heartbeat sweep raises and clears them.
NOT_FROM_SAMPLES = frozenset({OFFLINE_KEY, store.SENTINEL})


def chip_key(kind: str, npu: dict) -> str:
    return f"{kind}:{npu['npu_id']}:{npu['chip_id']}"


def conditions(message: dict, temp_limit_c: float, hbm_limit_pct: float) -> dict[str, dict]:
    """{alert key: fields of the alert} for every condition a "metrics" message shows."""
    found = {}
    if message.get("error"):
        found[AlertKind.SAMPLING_ERROR.value] = {
            "kind": AlertKind.SAMPLING_ERROR,
            "severity": AlertSeverity.CRITICAL,
            "message": f"npu-smi failed: {message['error']}",
        }
    for npu in message.get("npus") or []:
        where = {"npu_id": npu["npu_id"], "chip_id": npu["chip_id"]}
        label = f"NPU {npu['npu_id']}/{npu['chip_id']}"  # NPU names read "1/0" everywhere
        health = npu.get("health")
        if health in HEALTH_SEVERITY:
            found[chip_key(AlertKind.NPU_HEALTH, npu)] = {
                **where,
                "kind": AlertKind.NPU_HEALTH,
                "severity": HEALTH_SEVERITY[health],
                "message": f"{label} health is {health}",
            }
        temp = npu.get("temp_c")
        if temp is not None and temp > temp_limit_c:
            found[chip_key(AlertKind.NPU_TEMPERATURE, npu)] = {
                **where,
                "kind": AlertKind.NPU_TEMPERATURE,
                "severity": AlertSeverity.WARNING,
                "message": f"{label} is at {temp:g} °C (limit {temp_limit_c:g} °C)",
            }
        used, total = device_memory(npu)
        if used is not None and total and used * 100 / total > hbm_limit_pct:
            found[chip_key(AlertKind.NPU_HBM, npu)] = {
                **where,
                "kind": AlertKind.NPU_HBM,
                "severity": AlertSeverity.WARNING,
                "message": f"{label} memory is {used * 100 / total:.0f}% used (limit {hbm_limit_pct:g}%)",
            }
    return found


def device_memory(npu: dict) -> tuple[float | None, float | None]:
    """HBM where the chip has it, else its DDR (310P)."""
    if npu.get("hbm_total_mb"):
        return npu.get("hbm_used_mb"), npu["hbm_total_mb"]
    return npu.get("memory_used_mb"), npu.get("memory_total_mb")


def sample_conditions(message: dict) -> dict[str, dict]:
    return conditions(message, settings.PANEL_ALERT_TEMP_C, settings.PANEL_ALERT_HBM_PCT)


def open_keys(nodes: list[tuple[int, str, set[str]]]) -> list[set[str]]:
    """For each (node id, name, its cached Redis set) the node's open alert keys: from the cache, or from the
    database the first time (then cached), in one query and one Redis round trip for all the new ones."""
    missing = {node_id: name for node_id, name, cached in nodes if store.SENTINEL not in cached}
    found: dict[int, set[str]] = {node_id: set() for node_id in missing}
    if missing:
        for node_id, key in Alert.objects.open().filter(node_id__in=missing).values_list("node_id", "key"):
            found[node_id].add(key)
        pipe = store.client().pipeline(transaction=False)
        for node_id, name in missing.items():
            pipe.sadd(store.alerts_key(name), store.SENTINEL, *found[node_id])
        pipe.execute()
    return [found[node_id] if node_id in found else cached - {store.SENTINEL} for node_id, _, cached in nodes]


def reconcile_sample(node_id: int, node_name: str, message: dict, known: set[str]) -> None:
    """Raise what the sample shows and is not open yet (`known`: the node's open keys, from `open_keys`);
    resolve what is open and the sample no longer shows. While npu-smi fails, chip conditions are unknown, so
    only the error itself is decided."""
    current = sample_conditions(message)
    decided = known - NOT_FROM_SAMPLES
    if message.get("error"):
        decided = {key for key in decided if key == AlertKind.SAMPLING_ERROR.value}
    to_raise = {key: fields for key, fields in current.items() if key not in known}
    to_resolve = decided - set(current)
    if to_raise or to_resolve:
        apply_changes(node_id, node_name, to_raise, to_resolve)


def apply_changes(node_id: int, node_name: str, to_raise: dict[str, dict], to_resolve: set[str]) -> None:
    now = timezone.now()
    changed: list[tuple[str, Alert]] = []
    with transaction.atomic():
        for key, fields in to_raise.items():
            try:
                with transaction.atomic():
                    alert = Alert.objects.create(
                        node_id=node_id, key=key, first_seen=now, last_seen=now, **fields
                    )
            except IntegrityError:  # another worker thread raised it a moment ago
                continue
            changed.append(("raised", alert))
        if to_resolve:
            closing = list(
                Alert.objects.open().filter(node_id=node_id, key__in=to_resolve).select_for_update()
            )
            Alert.objects.filter(pk__in=[a.pk for a in closing]).update(resolved_at=now, last_seen=now)
            for alert in closing:
                alert.resolved_at = alert.last_seen = now
                changed.append(("resolved", alert))
        transaction.on_commit(lambda: _after_commit(node_name, to_raise, to_resolve, changed))


def _after_commit(node_name: str, raised: dict, resolved: set[str], changed: list[tuple[str, Alert]]) -> None:
    redis = store.client()
    if raised:
        redis.sadd(store.alerts_key(node_name), *raised)
    if resolved:
        redis.srem(store.alerts_key(node_name), *resolved)
    announce_all([(event, alert, node_name) for event, alert in changed])


def announce(event: str, alert: Alert, node_name: str) -> None:
    """Tell browsers (groups "alerts" and node.<name>) and, for raised / resolved, the webhook and the
    notification channels whose routes match."""
    announce_all([(event, alert, node_name)])


def announce_all(changes: list[tuple[str, Alert, str]]) -> None:
    """`announce` for many (event, alert, node name): one count and one trip to the channel layer."""
    if not changes:
        return
    open_unacknowledged = Alert.objects.needing_attention().count()
    sends = []
    for event, alert, node_name in changes:
        message = {
            "type": "alert",
            "event": event,
            "alert": alert_data(alert, node_name),
            "open_unacknowledged": open_unacknowledged,
        }
        sends.append((ALERTS, message))
        if alert.node_id:
            sends.append((node_group(node_name), message))
        if event in ("raised", "resolved") and settings.PANEL_ALERT_WEBHOOK_URL:
            try:
                send_alert_webhook.delay({"event": event, "alert": message["alert"]})
            except Exception:  # the webhook is best effort; never fail the caller over it
                log.exception("alert webhook for alert %s not queued", alert.pk)
    notify.dispatch([(event, alert) for event, alert, _ in changes if event in ("raised", "resolved")])
    broadcast_each(sends)


def node_went_offline(node) -> None:
    """The offline sweep found the node silent (panel.nodes.signals.node_offline)."""
    apply_changes(
        node.pk,
        node.name,
        {
            OFFLINE_KEY: {
                "kind": AlertKind.AGENT_OFFLINE,
                "severity": AlertSeverity.CRITICAL,
                "message": f"Agent of {node.name} stopped sending heartbeats",
            }
        },
        set(),
    )


def node_came_back(node) -> None:
    """Called when a heartbeat (or a metrics batch) arrives from a node that was not online."""
    nodes_came_back({node.pk: node.name})


def nodes_came_back(names_by_id: dict[int, str]) -> None:
    """Resolve the offline alerts of nodes that speak again: one query, one UPDATE and one announcement for
    however many came back at once (a site's switch back up brings hundreds in the same second)."""
    now = timezone.now()
    with transaction.atomic():
        closing = list(
            Alert.objects.open()
            .filter(node_id__in=names_by_id, key=OFFLINE_KEY)
            .order_by("pk")
            .select_for_update()
        )
        if not closing:
            return
        Alert.objects.filter(pk__in=[alert.pk for alert in closing]).update(resolved_at=now, last_seen=now)
        for alert in closing:
            alert.resolved_at = alert.last_seen = now
        changes = [("resolved", alert, names_by_id[alert.node_id]) for alert in closing]
        transaction.on_commit(lambda: _after_coming_back(changes))


def _after_coming_back(changes: list[tuple[str, Alert, str]]) -> None:
    pipe = store.client().pipeline(transaction=False)
    for _event, _alert, node_name in changes:
        pipe.srem(store.alerts_key(node_name), OFFLINE_KEY)
    pipe.execute()
    announce_all(changes)


def acknowledge(alert: Alert, user) -> Alert:
    with transaction.atomic():
        updated = Alert.objects.filter(pk=alert.pk, acknowledged_at__isnull=True).update(
            acknowledged_by=user, acknowledged_at=timezone.now()
        )
        alert.refresh_from_db()
        if updated:
            name = alert.subject
            transaction.on_commit(lambda: announce("acknowledged", alert, name))
    return alert
