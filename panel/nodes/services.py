"""Use-cases for nodes: heartbeats, inventory results, the offline sweep. Adding, cordoning and removing
nodes are in panel.nodes.lifecycle."""

import logging
from typing import Any, cast

from django.conf import settings
from django.db import transaction
from django.db.models import Case, F, Field, Q, Value, When
from django.utils import timezone

from panel.core.domain.choices import NodeStatus, NodeTransport, NpuHealth
from panel.core.models import one_or_none
from panel.nodes.health import health_state
from panel.nodes.models import Node, Npu, silent_limit
from panel.nodes.signals import node_not_inventoried, node_offline, node_online
from panel.realtime.broadcast import FLEET, broadcast, node_group
from workers.contracts import Heartbeat

log = logging.getLogger(__name__)


def node_status_message(node: Node) -> dict:
    return {
        "type": "node.status",
        "node": node.name,
        "status": node.effective_status,
        "last_heartbeat": node.last_heartbeat.isoformat() if node.last_heartbeat else None,
    }


def _announce(node: Node) -> None:
    message = node_status_message(node)

    def send() -> None:
        broadcast(node_group(node.name), message)
        broadcast(FLEET, message)

    transaction.on_commit(send)


def record_heartbeat(
    data: dict | Heartbeat, *, signer: str | None = None, node: Node | None = None
) -> Node | None:
    """Apply a heartbeat whose envelope panel.nodes.agents.trust verified (signer: the node itself, or the
    central agent for an SSH node's probe). `node`: its row as the envelope check just read it, if it did.

    The steady case, an online and inventoried node beating as before, is one conditional UPDATE with no
    lock and no transaction (_beat_in_place): at 512 nodes that is about a hundred a second. Anything that
    changes what the panel knows (coming online, an agent taking over from SSH, a first inventory, a row
    that changed since it was read) takes the locked path below, which sends the signals."""
    beat = Heartbeat.model_validate(data)
    if node is None:
        node = one_or_none(Node.objects.filter(name=beat.node))
    if node is not None and _beat_in_place(node, beat, signer):
        return node
    with transaction.atomic():
        node = one_or_none(Node.objects.select_for_update().filter(name=beat.node))
        if node is None:
            log.warning("heartbeat from unknown node %r ignored", beat.node)
            return None
        changed = ["last_heartbeat", "heartbeat_interval", "agent_version", "status", "updated"]
        now = timezone.now()
        if signer == node.name:
            if node.transport == NodeTransport.SSH:
                # The agent installed over SSH speaks with the node's own credential: it runs its own tasks.
                node.transport = NodeTransport.AGENT
                changed.append("transport")
            node.agent_running, node.agent_done = beat.running, beat.done
            node.agent_reported_at = now
            changed += ["agent_running", "agent_done", "agent_reported_at"]
        was = node.status
        node.last_heartbeat = now
        node.heartbeat_interval = beat.interval_s
        node.agent_version = beat.agent_version
        node.status = NodeStatus.ONLINE
        node.save(update_fields=changed)  # one UPDATE per heartbeat
        if was != NodeStatus.ONLINE:
            _announce(node)
            node_online.send(Node, node=node)
        if node.inventoried_at is None and settings.PANEL_INVENTORY_ON_FIRST_HEARTBEAT:
            node_not_inventoried.send(Node, node=node)
    return node


def _beat_in_place(node: Node, beat: Heartbeat, signer: str | None) -> bool:
    """Record an unremarkable heartbeat in one UPDATE that matches only while the row still has the status
    and transport `node` was read with. False when the heartbeat is not unremarkable, or when the row changed
    meanwhile (the offline sweep, a removal): the locked path then decides."""
    own = signer == node.name
    if node.name != beat.node or node.status != NodeStatus.ONLINE or node.inventoried_at is None:
        return False
    if own and node.transport == NodeTransport.SSH:  # an agent installed over SSH takes over: locked path
        return False
    now = timezone.now()
    changes = {
        "last_heartbeat": now,
        "heartbeat_interval": beat.interval_s,
        "agent_version": beat.agent_version,
        "updated": now,
    }
    if own:
        changes |= {"agent_running": beat.running, "agent_done": beat.done, "agent_reported_at": now}
    still_as_read = Node.objects.filter(
        pk=node.pk, status=NodeStatus.ONLINE, transport=node.transport, inventoried_at__isnull=False
    )
    if not still_as_read.update(**changes):
        return False
    for field, value in changes.items():
        setattr(node, field, value)
    return True


def record_drained_heartbeats(beats: list[tuple[str, Heartbeat, Node]]) -> None:
    """Apply the verified (signer, heartbeat, node row as read for that check) of one drain of the metrics
    inbox. Agents' own unremarkable ones (as in _beat_in_place: an online, inventoried agent node) are written
    in one UPDATE for the whole drain; the rest, and any whose row changed since it was read, go through
    record_heartbeat one by one. Only a node's last beat of the drain counts: it carries the newest
    operation lists."""
    latest = {node.pk: (signer, beat, node) for signer, beat, node in beats}
    steady = {
        pk: (beat, node)
        for pk, (signer, beat, node) in latest.items()
        if signer == node.name and _is_steady_agent(node)
    }
    others = [(signer, beat, node) for pk, (signer, beat, node) in latest.items() if pk not in steady]
    if steady:
        others += [(node.name, beat, node) for beat, node in _beat_all_in_place(steady)]
    for signer, beat, node in others:
        try:
            record_heartbeat(beat, signer=signer, node=node)
        except Exception:  # one node's failure (a row removed meanwhile) is not the others'
            log.exception("heartbeat of %s not recorded", node.name)


def _is_steady_agent(node: Node) -> bool:
    return (
        node.status == NodeStatus.ONLINE
        and node.inventoried_at is not None
        and node.transport == NodeTransport.AGENT
    )


# What a steady heartbeat may change besides its times: each column, and how the beat says it.
BEAT_FIELDS = (
    ("heartbeat_interval", lambda beat: beat.interval_s),
    ("agent_version", lambda beat: beat.agent_version),
    ("agent_running", lambda beat: beat.running),
    ("agent_done", lambda beat: beat.done),
)


def _beat_all_in_place(steady: dict) -> list[tuple[Heartbeat, Node]]:
    """One conditional UPDATE for `steady` ({pk: (heartbeat, node as read for its check)}); returns the pairs
    whose row no longer matched (the offline sweep or a removal came between), for the locked path.

    A field goes into the UPDATE only for the nodes whose beat changed it from the row just read (a CASE over
    those, the rest keep theirs): steady beats repeat their interval, version and operation lists, and
    building a CASE of every node for each of the four took more than half of the ingester's time on
    heartbeats (py-spy, 128 nodes)."""
    now = timezone.now()
    changes: dict[str, Any] = {"last_heartbeat": now, "agent_reported_at": now, "updated": now}
    for field, value_of in BEAT_FIELDS:
        column = cast(Field, Node._meta.get_field(field))
        whens = [
            When(pk=pk, then=Value(value_of(beat), output_field=column))
            for pk, (beat, node) in steady.items()
            if value_of(beat) != getattr(node, field)
        ]
        if whens:
            changes[field] = Case(*whens, default=F(field), output_field=column)
    still_steady = Node.objects.filter(
        pk__in=steady, status=NodeStatus.ONLINE, transport=NodeTransport.AGENT, inventoried_at__isnull=False
    )
    written = still_steady.update(**changes)
    if written == len(steady):
        return []
    recorded = set(Node.objects.filter(pk__in=steady, last_heartbeat=now).values_list("pk", flat=True))
    return [pair for pk, pair in steady.items() if pk not in recorded]


def mark_silent_nodes_offline(now=None) -> list[str]:
    """Nodes that missed three heartbeats become offline (the sweep behind effective_status): agents' own
    heartbeats and metrics, and SSH nodes' samples (panel.monitoring.metrics.ssh_probes)."""
    now = now or timezone.now()
    changed = []
    unwatched = Q(transport=NodeTransport.SSH, ssh_host_key_fingerprint="")
    # Every 2 s over every online node: three columns each, whole rows (facts, npu-smi text) only of the
    # silent ones, which are few.
    online = Node.objects.filter(status=NodeStatus.ONLINE).exclude(unwatched)
    silent = [
        pk
        for pk, last, interval in online.values_list("pk", "last_heartbeat", "heartbeat_interval")
        if last is None or now - last > silent_limit(interval)
    ]
    for node in Node.objects.filter(pk__in=silent):
        with transaction.atomic():
            updated = Node.objects.filter(pk=node.pk, status=NodeStatus.ONLINE).update(
                status=NodeStatus.OFFLINE
            )
            if updated:
                node.status = NodeStatus.OFFLINE
                _announce(node)
                node_offline.send(Node, node=node)
                changed.append(node.name)
    return changed


NPU_FIELDS = (
    "logic_id",
    "device_id",
    "name",
    "health",
    "hbm_total_mb",
    "memory_total_mb",
    "bus_id",
    "numa_node",
)


VOLATILE_FACT_WORDS = ("free", "used", "avail", "load")


def _stable(value):
    """Facts without the figures that move between two inventories (free memory, disk use, load)."""
    if isinstance(value, dict):
        return {k: _stable(v) for k, v in value.items() if not any(w in k for w in VOLATILE_FACT_WORDS)}
    if isinstance(value, list):
        return [_stable(v) for v in value]
    return value


def apply_inventory(node: Node, result: dict) -> dict:
    """Store an inventory on the node and its NPUs; returns what changed since the last one (nothing on
    the first: everything would be "new")."""
    changes: dict[str, Any] = {}  # a JSON object: lists, maps, what changed per kind
    facts, versions = result.get("facts") or {}, result.get("versions") or {}
    old_facts, new_facts = _stable(node.facts), _stable(facts)
    if old_facts != new_facts:
        changes["facts"] = sorted(
            k for k in set(new_facts) | set(old_facts) if new_facts.get(k) != old_facts.get(k)
        )
    if versions != node.versions:
        changes["versions"] = {
            k: [node.versions.get(k), versions.get(k)]
            for k in set(versions) | set(node.versions)
            if versions.get(k) != node.versions.get(k)
        }
    node.facts, node.versions = facts, versions
    node.npu_smi_info = result.get("npu_smi_info") or ""
    node.save(update_fields=["facts", "versions", "npu_smi_info", "updated"])
    seen = set()
    added = False
    for chip in result.get("npus") or []:
        key = (int(chip["npu_id"]), int(chip.get("chip_id") or 0))
        seen.add(key)
        values = {f: chip.get(f) for f in NPU_FIELDS if f in chip}
        values["health"] = values.get("health") or NpuHealth.UNKNOWN
        values["bus_id"] = values.get("bus_id") or ""
        values["name"] = values.get("name") or ""
        npu, created = Npu.objects.update_or_create(node=node, npu_id=key[0], chip_id=key[1], defaults=values)
        if created:
            added = True
            changes.setdefault("npus_added", []).append(f"{key[0]}/{key[1]}")
    if added:  # the health policy watches them from the next sample on
        name = node.name
        transaction.on_commit(lambda: health_state.chips_added(name))
    gone = [npu for npu in node.npus.all() if (npu.npu_id, npu.chip_id) not in seen]
    if gone and result.get("npus") is not None:
        changes["npus_removed"] = [f"{n.npu_id}/{n.chip_id}" for n in gone]
        Npu.objects.filter(pk__in=[n.pk for n in gone]).delete()
    if node.inventoried_at is None:
        changes = {}
    node.inventory_changes, node.inventoried_at = changes, timezone.now()
    node.save(update_fields=["inventory_changes", "inventoried_at"])
    return changes
