"""Use-cases of monitoring: ingest a metrics batch (the 1 Hz path), sending the fleet summary
(panel.monitoring.metrics.fleet), the per-node sampling interval, acknowledging alerts.

The ingest path takes whatever batches the panel worker drained from the metrics inbox at once: one Redis
round trip for all of them, which also publishes their frames to browsers (panel.realtime.frames). It
touches the database only when an alert changes, when a node that was not online speaks, every
NODE_CACHE_S to refresh the node cache (one query for all nodes), and every HEARTBEAT_EVERY_S for one
UPDATE of the last heartbeat of every node heard from meanwhile — not per node, so the SQLite write lock and
connection set-up stay off the 1 Hz path."""

import logging
import math
import threading
import time
from datetime import UTC, datetime
from typing import cast

import orjson
from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from panel.core.domain.choices import NodeStatus, NodeTransport
from panel.monitoring.alerting import alerts
from panel.monitoring.metrics import store
from panel.monitoring.metrics.fleet import fleet_summary, node_figures
from panel.monitoring.models import NodeSampling
from panel.nodes.agents.trust import send_agent_task
from panel.nodes.health import health_state
from panel.nodes.models import Node, Npu
from panel.nodes.services import node_status_message
from panel.realtime import frames
from panel.realtime.broadcast import FLEET, broadcast_each, frame, node_group
from workers.contracts import MetricBatch
from workers.sampler import MIN_INTERVAL_S
from workers.task_names import AGENT_SET_METRICS_INTERVAL

log = logging.getLogger(__name__)

HEARTBEAT_EVERY_S = 3  # a metrics batch counts as a heartbeat; they are written in one UPDATE this often
HEARTBEATS_PER_WRITE = 10_000
NODE_CACHE_S = 10  # how long node ids, statuses and NPU → deployment maps are reused
FLEET_EVERY_MS = 1000


class NodeCache:
    """Node id, status and which deployment holds each chip, per node name, for all nodes at once: loaded
    with two queries and reused for NODE_CACHE_S, so a fleet's worth of batches costs no queries."""

    def __init__(self):
        self._loaded_at = float("-inf")
        self._entries: dict[str, dict] = {}
        self._lock = threading.Lock()

    def get(self, name: str) -> dict | None:
        if time.monotonic() - self._loaded_at >= NODE_CACHE_S:
            with self._lock:
                if time.monotonic() - self._loaded_at >= NODE_CACHE_S:
                    self._entries = self._load()
                    self._loaded_at = time.monotonic()
        return self._entries.get(name)

    def forget(self, name: str | None = None) -> None:
        """Reload on the next `get` (after a node's status changed, or a node was added)."""
        with self._lock:
            self._loaded_at = float("-inf")

    @staticmethod
    def _load() -> dict[str, dict]:
        entries: dict[str, dict] = {
            row["name"]: {**row, "deployments": {}} for row in Node.objects.values("id", "name", "status")
        }
        by_id = {entry["id"]: entry for entry in entries.values()}
        rows = Npu.objects.filter(deployments__isnull=False).values(
            "node_id", "npu_id", "chip_id", "deployments__name"
        )
        for row in rows:
            holders = by_id[row["node_id"]]["deployments"]
            holders.setdefault((row["npu_id"], row["chip_id"]), row["deployments__name"])
        return entries


nodes = NodeCache()


def metrics_message(node: dict, batch: MetricBatch) -> dict:
    """The "metrics" message of the newest sample of a batch, as browsers and /metrics read it."""
    sample = batch.samples[-1].model_dump()  # one serializer call for the host and every chip
    holders = node["deployments"]
    for npu in sample["npus"]:
        npu["deployment"] = holders.get((npu["npu_id"], npu["chip_id"]))
    return {
        "type": "metrics",
        "node": node["name"],
        "seq": batch.seq,
        "time": sample["time"].isoformat(),
        "host": sample["host"],
        "npus": sample["npus"],
        "error": sample["error"],
    }


def ingest_metrics(data: dict) -> dict | None:
    """Ingest one batch (see `ingest_batches`); raises ValidationError for a malformed one."""
    messages = ingest_batches([MetricBatch.model_validate(data)])
    return messages[0] if messages else None


def ingest_batches(batches: list[MetricBatch]) -> list[dict]:
    """Store batches in Redis, publish them to browsers, keep alerts and heartbeats in step: one Redis round
    trip for all of them. Returns the "metrics" messages of the batches taken."""
    taken = []
    for batch in batches:
        node = nodes.get(batch.node) if batch.samples else None
        if node is None and batch.samples:
            log.warning("metrics from unknown node %r dropped; register the node first", batch.node)
        if node is not None:
            taken.append((node, batch, metrics_message(node, batch)))
    if not taken:
        return []
    received = time.time()
    pipe = store.client().pipeline(transaction=False)
    alert_reads, health_reads = [], []  # where in the pipeline's answers each batch's alerts and chips are
    for node, batch, message in taken:
        # When the panel took it, in the stored latest message and the frame alike: a page (and the fleet
        # bench) can tell the agent → panel part of a frame's age from the panel → browser part.
        message["received"] = received
        _queue_store(pipe, node["name"], batch, message, received)
        alert_reads.append(len(pipe))
        pipe.smembers(store.alerts_key(node["name"]))
        # The chips' health memory rides this round trip instead of one of its own per drain.
        health_reads.append(len(pipe))
        pipe.hgetall(health_state.memory_key(node["name"]))
    pipe.sadd(store.NODES, *{node["name"] for node, _, _ in taken})
    pipe.zadd(store.HEARTBEATS_DUE, {node["id"]: received for node, _, _ in taken})
    pipe.set(store.HEARTBEATS_WRITE, "1", nx=True, ex=HEARTBEAT_EVERY_S)
    pipe.set(store.FLEET_DUE, "1", nx=True, px=FLEET_EVERY_MS)
    # Last, so a browser that gets a frame can already read the same figures over REST.
    node_frames = [
        (node_group(node["name"]), frame(node_group(node["name"]), message)) for node, _, message in taken
    ]
    pipe.publish(frames.channel(), frames.encode(node_frames))
    *answers, _, _, heartbeats_due, fleet_due, _receivers = pipe.execute()

    known = alerts.open_keys(
        [
            (node["id"], node["name"], set(answers[at]))
            for (node, _, _), at in zip(taken, alert_reads, strict=True)
        ]
    )
    for (node, _batch, message), keys in zip(taken, known, strict=True):
        alerts.reconcile_sample(node["id"], node["name"], message, keys)
    _observe_npu_health(taken, [answers[at] for at in health_reads])
    silent = [node for node, _, _ in taken if node["status"] != NodeStatus.ONLINE]
    if silent:
        back = _first_in_a_while(silent)
        if back:
            touch_heartbeats([node["id"] for node in back])  # back online now, not at the next batched write
            nodes.forget()  # the cache had them silent: stale, whether or not the database agreed
    if heartbeats_due:
        write_heartbeats()
    if fleet_due:
        frames.publish([(FLEET, frame(FLEET, fleet_summary()))])
    return [message for _, _, message in taken]


def _observe_npu_health(taken: list[tuple[dict, MetricBatch, dict]], memories: list) -> None:
    """Every sample's chips through the NPU health policy (panel.nodes.health.health_state), oldest first;
    `memories`: each node's health memory as the drain's round trip read it."""
    items = [
        (
            node["id"],
            node["name"],
            [sample.model_dump(include={"npus"})["npus"] for sample in batch.samples[:-1]]
            + [message["npus"]],
        )
        for node, batch, message in taken
    ]
    try:
        health_state.observe_batches(items, memories=memories)
    except Exception:  # the figures are stored already; a health update is tried again with the next batch
        log.exception("NPU health not updated for this drain")


RING_FIELDS = {"host", "npus"}
RING_TRIM_S = 60  # how often a node's ring buffer drops what is older than PANEL_METRICS_RING_SECONDS
_ring_trimmed: dict[str, float] = {}  # node name -> when this process last trimmed its ring


def _queue_store(pipe, name: str, batch: MetricBatch, message: dict, received: float) -> None:
    """Queue the latest value and the ring-buffer samples of one batch. The ring is trimmed (and its expiry
    pushed back) once a minute, not per sample: readers filter by time anyway."""
    pipe.set(store.latest_key(name), orjson.dumps(message), ex=store.LATEST_TTL_S)
    pipe.hset(store.FIGURES, name, node_figures(message, received))
    ring = store.ring_key(name)
    members = {}
    for sample in batch.samples[:-1]:
        epoch = sample.time.timestamp()
        members[store.compact(sample.model_dump(include=RING_FIELDS), epoch)] = epoch
    # The newest sample's figures are the message's (its chips carry a "deployment" the ring leaves out).
    epoch = batch.samples[-1].time.timestamp()
    members[store.compact(message, epoch)] = epoch
    pipe.zadd(ring, members)
    if received - _ring_trimmed.get(name, float("-inf")) >= RING_TRIM_S:
        _ring_trimmed[name] = received
        pipe.zremrangebyscore(ring, "-inf", received - settings.PANEL_METRICS_RING_SECONDS)
        pipe.expire(ring, settings.PANEL_METRICS_RING_SECONDS + RING_TRIM_S + 120)


def write_heartbeats() -> None:
    """The last heartbeat of every node whose metrics arrived since the last write, as when they arrived (to
    the second: an UPDATE per second of the few the write covers); those the database does not have online
    (the sweeper marked them offline meanwhile) come back with it. Stamped with the write's own time, a
    node's last word counted up to HEARTBEAT_EVERY_S late, and a lost node was moved that much later."""
    popped = cast(list, store.client().zpopmin(store.HEARTBEATS_DUE, HEARTBEATS_PER_WRITE) or [])
    heard = {int(member): float(at) for member, at in popped}
    if not heard:
        return
    touch_heartbeats(list(heard), heard)


def _first_in_a_while(silent: list[dict]) -> list[dict]:
    """Of nodes the cache has not online, those no panel worker brought back in the last HEARTBEAT_EVERY_S
    (one pipelined SET NX for all), so a node's first batches after an outage bring it back once."""
    pipe = store.client().pipeline(transaction=False)
    for node in silent:
        pipe.set(store.heartbeat_key(node["name"]), "1", nx=True, ex=HEARTBEAT_EVERY_S)
    return [node for node, first in zip(silent, pipe.execute(), strict=True) if first]


def touch_heartbeats(ids: list[int], heard: dict[int, float] | None = None) -> None:
    """Metrics batches are signs of life: record them for the nodes `ids` (`heard`: when each one's came,
    Unix seconds; else now), an UPDATE per second they name, never moving a heartbeat back, and bring those
    the database does not have online back in the same transaction, with one announcement for all of them.
    Per node, a burst of hundreds coming back (a switch up again) cost a transaction, four channel-layer
    trips and a reload of the node cache each, and put the ingest minutes behind."""
    if not ids:
        return
    now = timezone.now()
    seconds: dict[float, list[int]] = {}
    for pk in ids:
        seconds.setdefault(math.floor((heard or {}).get(pk, now.timestamp())), []).append(pk)
    with transaction.atomic():
        back = list(
            Node.objects.select_for_update()
            .filter(pk__in=ids)
            .exclude(status=NodeStatus.ONLINE)
            .order_by("pk")
        )
        Node.objects.filter(pk__in=[node.pk for node in back]).update(status=NodeStatus.ONLINE)
        stamped: dict[int, datetime] = {}
        for second, pks in seconds.items():
            at = datetime.fromtimestamp(second, tz=UTC)
            stamped |= dict.fromkeys(pks, at)
            earlier = Q(last_heartbeat__lt=at) | Q(last_heartbeat__isnull=True)
            Node.objects.filter(earlier, pk__in=pks).update(last_heartbeat=at)
        statuses = []
        for node in back:
            node.status, node.last_heartbeat = NodeStatus.ONLINE, stamped[node.pk]
            status = node_status_message(node)
            statuses += [(node_group(node.name), status), (FLEET, status)]
        if back:
            transaction.on_commit(lambda: broadcast_each(statuses))
            alerts.nodes_came_back({node.pk: node.name for node in back})
    if back:
        nodes.forget()  # their cached statuses are stale


def set_metrics_interval(node: Node, seconds: float, user=None) -> float:
    """Save the node's sampling interval and, after commit, tell its agent (task on the node's queue). An
    SSH node has no agent: its probes read the saved interval (panel.monitoring.metrics.ssh_probes)."""
    seconds = float(seconds)
    if not MIN_INTERVAL_S <= seconds <= 3600:
        raise ValueError(f"metrics interval must be between {MIN_INTERVAL_S} and 3600 seconds, got {seconds}")
    with transaction.atomic():
        NodeSampling.objects.update_or_create(node=node, defaults={"interval_s": seconds})
        if node.transport == NodeTransport.AGENT:
            transaction.on_commit(
                lambda: send_agent_task(node, AGENT_SET_METRICS_INTERVAL, {"seconds": seconds})
            )
    log.info("metrics interval of %s set to %s s by %s", node.name, seconds, user)
    return seconds
