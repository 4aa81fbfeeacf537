"""Use-cases of monitoring: ingest a metrics batch (the 1 Hz path), the fleet summary, the per-node sampling
interval, acknowledging alerts.

The ingest path makes one Redis round trip and two channel-layer sends per batch; it writes to the
database only when an alert changes or, every HEARTBEAT_EVERY_S, the node's last heartbeat."""

import json
import logging
import threading
import time

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from panel.core.choices import NodeStatus
from panel.monitoring import alerts, fanout, store
from panel.nodes.models import Node, Npu
from panel.realtime.broadcast import FLEET, broadcast, node_group
from workers.celery_app import app as celery_app
from workers.contracts import MetricBatch
from workers.task_names import AGENT_SET_METRICS_INTERVAL, node_queue

log = logging.getLogger(__name__)

HEARTBEAT_EVERY_S = 3  # a metrics batch counts as a heartbeat, written at most this often per node
NODE_CACHE_S = 10  # how long node ids and NPU → deployment maps are reused
FLEET_EVERY_MS = 1000


class NodeCache:
    """Node id, status and which deployment holds each chip, per node name, refreshed every NODE_CACHE_S."""

    def __init__(self):
        self._entries: dict[str, tuple[float, dict | None]] = {}
        self._lock = threading.Lock()

    def get(self, name: str) -> dict | None:
        entry = self._entries.get(name)
        if entry is not None and time.monotonic() - entry[0] < NODE_CACHE_S:
            return entry[1]
        info = self._load(name)
        with self._lock:
            self._entries[name] = (time.monotonic(), info)
        return info

    def forget(self, name: str) -> None:
        with self._lock:
            self._entries.pop(name, None)

    @staticmethod
    def _load(name: str) -> dict | None:
        node = Node.objects.filter(name=name).values("id", "status").first()
        if node is None:
            return None
        holders = {}
        rows = Npu.objects.filter(node_id=node["id"], deployments__isnull=False).values(
            "npu_id", "chip_id", "deployments__name"
        )
        for row in rows:
            holders.setdefault((row["npu_id"], row["chip_id"]), row["deployments__name"])
        return {**node, "name": name, "deployments": holders}


nodes = NodeCache()


def metrics_message(node: dict, batch: MetricBatch) -> dict:
    """The "metrics" message of the newest sample of a batch, as browsers and /metrics read it."""
    sample = batch.samples[-1]
    holders = node["deployments"]
    return {
        "type": "metrics",
        "node": node["name"],
        "seq": batch.seq,
        "time": sample.time.isoformat(),
        "host": sample.host.model_dump(),
        "npus": [
            {**npu.model_dump(), "deployment": holders.get((npu.npu_id, npu.chip_id))} for npu in sample.npus
        ],
        "error": sample.error,
    }


def ingest_metrics(data: dict) -> dict | None:
    """Store a batch in Redis, broadcast it, keep alerts and the heartbeat in step. Returns the message."""
    batch = MetricBatch.model_validate(data)
    if not batch.samples:
        return None
    node = nodes.get(batch.node)
    if node is None:
        log.warning("metrics from unknown node %r dropped; register the node first", batch.node)
        return None
    message = metrics_message(node, batch)
    received = time.time()
    name = node["name"]
    pipe = store.client().pipeline(transaction=False)
    pipe.set(store.latest_key(name), _latest_json(message, received), ex=store.LATEST_TTL_S)
    ring = store.ring_key(name)
    for sample in batch.samples:
        figures = {"host": sample.host.model_dump(), "npus": [npu.model_dump() for npu in sample.npus]}
        epoch = sample.time.timestamp()
        pipe.zadd(ring, {store.compact(figures, epoch): epoch})
    pipe.zremrangebyscore(ring, "-inf", received - settings.PANEL_METRICS_RING_SECONDS)
    pipe.expire(ring, settings.PANEL_METRICS_RING_SECONDS + 120)
    pipe.sadd(store.NODES, name)
    pipe.set(store.heartbeat_key(name), "1", nx=True, ex=HEARTBEAT_EVERY_S)
    pipe.smembers(store.alerts_key(name))
    pipe.set(store.FLEET_DUE, "1", nx=True, px=FLEET_EVERY_MS)
    *_, heartbeat_due, open_alerts, fleet_due = pipe.execute()

    fanout.send(node_group(name), message)
    alerts.reconcile_sample(node["id"], name, message, set(open_alerts))
    if heartbeat_due:
        touch_heartbeat(node)
    if fleet_due:
        fanout.send(FLEET, fleet_summary())
    return message


def _latest_json(message: dict, received: float) -> str:
    return json.dumps({**message, "received": received}, separators=(",", ":"))


def touch_heartbeat(node: dict) -> None:
    """A metrics batch is a sign of life: record it (throttled by the caller), and bring the node online."""
    now = timezone.now()
    with transaction.atomic():
        came_back = (
            Node.objects.filter(pk=node["id"])
            .exclude(status=NodeStatus.ONLINE)
            .update(status=NodeStatus.ONLINE, last_heartbeat=now)
        )
        if not came_back:
            Node.objects.filter(pk=node["id"]).update(last_heartbeat=now)
            return
        row = Node.objects.get(pk=node["id"])
        from panel.nodes.services import node_status_message

        status = node_status_message(row)
        transaction.on_commit(lambda: (broadcast(node_group(row.name), status), broadcast(FLEET, status)))
        alerts.node_came_back(row)
    nodes.forget(node["name"])


def fleet_summary() -> dict:
    """One line per node: status, NPU count, mean utilisation, HBM and power totals, open alerts."""
    rows = list(
        Node.objects.values("id", "name", "status", "transport", "last_heartbeat", "heartbeat_interval")
    )
    names = [row["name"] for row in rows]
    latest = store.read_latest(names)
    pipe = store.client().pipeline(transaction=False)
    for name in names:
        pipe.smembers(store.alerts_key(name))
    open_sets = pipe.execute() if names else []
    summary = []
    for row, open_keys in zip(rows, open_sets, strict=True):
        message = latest.get(row["name"]) or {}
        npus = message.get("npus") or []
        utils = [n["aicore_pct"] for n in npus if n.get("aicore_pct") is not None]
        memory = [alerts.device_memory(n) for n in npus]
        summary.append(
            {
                "name": row["name"],
                "status": _effective_status(row),
                "npus": len(npus),
                "util_mean": round(sum(utils) / len(utils), 1) if utils else None,
                "hbm_used_mb": sum(used or 0 for used, _ in memory) if npus else None,
                "hbm_total_mb": sum(total or 0 for _, total in memory) if npus else None,
                "power_w": round(sum(n.get("power_w") or 0 for n in npus), 1) if npus else None,
                "alerts": len(set(open_keys) - {store.SENTINEL}),
                "time": message.get("time"),
            }
        )
    return {"type": "fleet.summary", "nodes": summary}


def _effective_status(row: dict) -> str:
    node = Node(**{k: row[k] for k in ("status", "transport", "last_heartbeat", "heartbeat_interval")})
    return node.effective_status


def set_metrics_interval(node: Node, seconds: float, user=None) -> float:
    """Save the node's sampling interval and, after commit, tell its agent (task on the node's queue)."""
    from workers.sampler import MIN_INTERVAL_S

    seconds = float(seconds)
    if not MIN_INTERVAL_S <= seconds <= 3600:
        raise ValueError(f"metrics interval must be between {MIN_INTERVAL_S} and 3600 seconds, got {seconds}")
    from panel.monitoring.models import NodeSampling

    with transaction.atomic():
        NodeSampling.objects.update_or_create(node=node, defaults={"interval_s": seconds})
        transaction.on_commit(
            lambda: celery_app.send_task(
                AGENT_SET_METRICS_INTERVAL, args=[seconds], queue=node_queue(node.name)
            )
        )
    log.info("metrics interval of %s set to %s s by %s", node.name, seconds, user)
    return seconds
