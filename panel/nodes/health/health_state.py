"""Keeping each NPU's health state (Npu.health_state) in step with the policy (panel.nodes.health.npu_health),
and an admin's override of it.

The metrics ingest calls `observe_batches` with every batch's chips (1 Hz per node): each chip's policy
memory lives in one Redis hash per node (`npuhealth:<node>`, a field per chip, plus the chip's state as last
written), read for all nodes of a drain in one round trip and written back only when it changed. The database
is touched only when a state changes: then, in one transaction, the NPU row, a NpuHealthChange (the node's
history), an audit entry, and the domain signal `npu_health_changed` (deployments record a decision for the
deployments on the chip; the gateway's failover acts on it); browsers hear of it on commit.
"""

import json
import logging
import time
from functools import cache

from django.db import transaction
from django.utils import timezone
from redis.typing import EncodableT, FieldT

from panel.audit import actions as audit
from panel.audit.services import record
from panel.core.domain.choices import NpuHealth, NpuHealthState
from panel.core.infra import panel_redis
from panel.nodes.health import npu_health
from panel.nodes.models import Node, Npu, NpuHealthChange
from panel.nodes.signals import npu_health_changed
from panel.realtime.broadcast import broadcast_each, node_group

log = logging.getLogger(__name__)

PREFIX = "npuhealth:"
LOADED = "-"  # a hash holding this field was filled from the database
RECHECK = "-recheck"  # when chips the hash lacks may be looked up in the database again
RECHECK_S = 30
MEMORY_TTL_S = 7 * 24 * 3600
# A chip's entry is written back only if nobody wrote it since the drain read it: an admin's override lands
# between the read and the write, and the drain's older entry (still `failed`) must not undo it in Redis while
# the database says `ok` (the next sample is read against the override's entry instead).
# KEYS[1]: a node's memory; ARGV: its TTL, then (field, the value read or "" when absent, the new value).
WRITE_IF_UNCHANGED = """
for i = 2, #ARGV, 3 do
  local now = redis.call('HGET', KEYS[1], ARGV[i])
  if (now == false and ARGV[i + 1] == '') or now == ARGV[i + 1] then
    redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 2])
  end
end
redis.call('EXPIRE', KEYS[1], tonumber(ARGV[1]))
"""


class HealthStateError(ValueError):
    """An override the panel refuses (unknown state); the message says what to give."""


def memory_key(node_name: str) -> str:
    return f"{PREFIX}{node_name}"


def chip_field(npu_id: int, chip_id: int) -> str:
    return f"{npu_id}:{chip_id}"


def observe_batches(
    items: list[tuple[int, str, list[list[dict]]]], now: float | None = None, memories: list | None = None
) -> None:
    """`items`: (node id, node name, the chips of each sample of its batch, oldest first). `memories`: each
    item's hash at memory_key, when the caller read them in a round trip of its own (the metrics ingest reads
    them with its drain's writes); read here otherwise. Writes go back only if the hash is still as read."""
    chosen = [at for at, item in enumerate(items) if any(item[2])]
    if not chosen:
        return
    now = time.time() if now is None else now
    redis = panel_redis.client()
    if memories is None:
        pipe = redis.pipeline(transaction=False)
        for at in chosen:
            pipe.hgetall(memory_key(items[at][1]))
        stored = pipe.execute()
    else:
        stored = [memories[at] for at in chosen]
    items = [items[at] for at in chosen]
    due = [
        node_id
        for (node_id, _, samples), entries in zip(items, stored, strict=True)
        if _due(entries, samples, now)
    ]
    loaded = _load_states(due)  # one query for every node that needs its states read
    writes = redis.pipeline(transaction=False)
    for (node_id, name, samples), entries in zip(items, stored, strict=True):
        read = entries
        fresh: dict[str, str] = {}
        if node_id in loaded:  # written back below even when nothing changed: read once in a while only
            fresh = {field: raw for field, raw in loaded[node_id].items() if field not in entries}
            fresh |= {LOADED: "1", RECHECK: str(now + RECHECK_S)}
            entries = {**entries, **fresh}
        changed_entries, changes = _observe_node(entries, samples, now)
        if changes:
            changed_entries.update(apply_changes(node_id, changes))
        changed_entries = {**fresh, **changed_entries}
        if changed_entries:
            args: list[EncodableT] = [MEMORY_TTL_S]
            for field, raw in {LOADED: "1", **changed_entries}.items():
                args += [field, read.get(field, ""), raw]
            # EVAL, not a registered script: a pipeline with one asks SCRIPT EXISTS first, a round trip more
            # on every drain of the 1 Hz metrics path; Redis keeps the compiled script by its hash anyway.
            writes.eval(WRITE_IF_UNCHANGED, 1, memory_key(name), *args)
    writes.execute()


def chips_added(node_name: str) -> None:
    """An inventory added NPU rows to the node: its next sample reads their states from the database, not
    at the hash's next look in up to RECHECK_S. Until a chip is in the hash its samples are skipped, so a
    node whose first samples came before its inventory (every panel start, every new node) had a Critical
    chip marked failed only at that look (17.7 s in bench/failover.py, up to 30 s)."""
    panel_redis.client().hdel(memory_key(node_name), RECHECK)


def _due(entries: dict, samples: list[list[dict]], now: float) -> bool:
    """Whether a node's states are to be read from the database: the first time (or after Redis lost them),
    after an inventory added chips (`chips_added`), and when the hash lacks chips a sample has (chips the
    database does not have) at most every RECHECK_S."""
    if LOADED not in entries:
        return True
    missing = any(
        chip_field(npu["npu_id"], npu["chip_id"]) not in entries for chips in samples for npu in chips
    )
    return missing and now >= float(entries.get(RECHECK, 0))


def _load_states(node_ids: list[int]) -> dict[int, dict[str, str]]:
    """Per node, its chips' states from the database as hash entries with empty memories."""
    found: dict[int, dict[str, str]] = {node_id: {} for node_id in node_ids}
    if node_ids:
        rows = Npu.objects.filter(node_id__in=node_ids).values_list(
            "node_id", "npu_id", "chip_id", "health_state"
        )
        for node_id, npu_id, chip_id, state in rows:
            found[node_id][chip_field(npu_id, chip_id)] = json.dumps({"state": state, "memory": {}})
    return found


def _observe_node(entries: dict, samples: list[list[dict]], now: float) -> tuple[dict, list[dict]]:
    """Run the policy over a node's samples: (hash entries to write, state changes to apply)."""
    changed: dict[str, str] = {}
    changes: dict[str, dict] = {}
    for chips in samples:
        for npu in chips:
            field = chip_field(npu["npu_id"], npu["chip_id"])
            raw = changed.get(field) or entries.get(field)
            if raw is None:
                continue  # a chip the inventory does not have: nothing to keep a state on
            if _is_quiet(npu) and raw == _quiet_entry(npu["npu_id"], npu["chip_id"]):
                continue  # a healthy chip sampled healthy: the policy would leave its entry as it is
            entry = json.loads(raw)
            memory, verdict = npu_health.observe(entry["memory"], npu, now)
            memory["last_chip"] = _last_chip(npu)
            state = npu_health.next_state(entry["state"], verdict, memory, now)
            if state != entry["state"]:
                worst = verdict.worst
                changes[field] = {
                    "npu_id": npu["npu_id"],
                    "chip_id": npu["chip_id"],
                    "old": entry["state"],
                    "new": state,
                    "signal": worst.signal if worst and state != NpuHealthState.OK else "recovered",
                    "detail": verdict.detail if state != NpuHealthState.OK else "no signal for 10 minutes",
                    "keys": [finding.key for finding in verdict.findings][:20],
                }
            new_raw = json.dumps({"state": state, "memory": memory}, sort_keys=True)
            if new_raw != raw:
                changed[field] = new_raw
    return changed, list(changes.values())


def _last_chip(npu: dict) -> dict:
    """What an override forgives besides the findings kept in the memory."""
    gone = bool((npu.get("probe") or {}).get("gone"))
    return {
        "npu_id": npu["npu_id"],
        "chip_id": npu["chip_id"],
        "health": npu.get("health"),
        "probe": {"gone": True} if gone else None,
    }


def _is_quiet(npu: dict) -> bool:
    """A sample that says nothing to the policy: health word OK and no probe (most samples of a fleet)."""
    return npu.get("health") == NpuHealth.OK and not npu.get("probe")


@cache
def _quiet_entry(npu_id: int, chip_id: int) -> str | None:
    """The hash entry of a chip in state ok that the policy holds nothing against, found by running the
    policy: a quiet sample leaves this entry as it is, so the ingest skips the policy for it (the policy's
    JSON round trip of every chip every second was a sixth of a panel worker's CPU at 512 nodes). None if
    the policy ever keeps something of a quiet sample (then every sample goes through it)."""
    npu = {"npu_id": npu_id, "chip_id": chip_id, "health": str(NpuHealth.OK), "probe": None}
    before: dict = {"state": str(NpuHealthState.OK), "memory": {}}
    for _ in range(2):  # from an empty memory, then from what that left: it must not move again
        memory, verdict = npu_health.observe(before["memory"], npu, 0.0)
        memory["last_chip"] = _last_chip(npu)
        after = {"state": npu_health.next_state(before["state"], verdict, memory, 0.0), "memory": memory}
        if after == before:
            return json.dumps(after, sort_keys=True)
        before = after
    return None


def apply_changes(node_id: int, changes: list[dict], user=None) -> dict[str, str]:
    """Write state changes of one node's chips (by the policy, or `user`) and tell everyone; returns hash
    entries whose state the database did not take (a row changed meanwhile: the database wins)."""
    now = timezone.now()
    corrections: dict[str, str] = {}
    announced = []
    with transaction.atomic():
        node = Node.objects.select_for_update().get(pk=node_id)
        for change in changes:
            npu = Npu.objects.filter(node=node, npu_id=change["npu_id"], chip_id=change["chip_id"]).first()
            if npu is None:
                continue
            if npu.health_state != change["old"] and user is None:
                corrections[chip_field(npu.npu_id, npu.chip_id)] = json.dumps(
                    {"state": npu.health_state, "memory": {}}
                )
                continue
            announced.append(_change(node, npu, change, now, user))
        _node_verdict(node, user)
    if announced:
        transaction.on_commit(lambda: broadcast_each(announced))
    return corrections


def _change(node: Node, npu: Npu, change: dict, now, user) -> tuple[str, dict]:
    old, new = npu.health_state, change["new"]
    by = user.get_username() if user is not None else "policy"
    reason = {"signal": change["signal"], "detail": change["detail"][:500], "at": now.isoformat(), "by": by}
    if change.get("keys"):
        reason["keys"] = change["keys"]  # what an override forgives, should the policy's memory be lost
    npu.health_state, npu.health_reason, npu.health_changed_at = new, reason, now
    npu.save(update_fields=["health_state", "health_reason", "health_changed_at", "updated"])
    name = f"{npu.npu_id}/{npu.chip_id}"
    NpuHealthChange.objects.create(
        node=node,
        npu=npu,
        npu_name=name,
        time=now,
        old=old,
        new=new,
        signal=change["signal"][:32],
        detail=change["detail"][:500],
        user=user,
    )
    record(user or "policy", audit.NPU_HEALTH_CHANGED, f"{node.name} NPU {name}", old=old, new=new, **reason)
    log.warning(
        "%s NPU %s health %s -> %s (%s: %s)", node.name, name, old, new, reason["signal"], reason["detail"]
    )
    npu_health_changed.send(sender=Npu, npu=npu, old=old, new=new, reason=reason)
    message = {"type": "npu_health", "node": node.name, "npu_id": npu.npu_id, "chip_id": npu.chip_id}
    return node_group(node.name), {**message, "old": old, "new": new, "reason": reason}


def _node_verdict(node: Node, user) -> None:
    """A node whose failed share reaches the policy's limit is cordoned (no new work), with the reason."""
    if node.cordoned or user is not None:
        return
    states = list(Npu.objects.filter(node=node).values_list("health_state", flat=True))
    if npu_health.node_failed(states):
        Node.objects.filter(pk=node.pk).update(cordoned=True)
        failed = states.count(NpuHealthState.FAILED)
        detail = f"{failed} of {len(states)} NPUs failed"
        record("policy", audit.NPU_HEALTH_CHANGED, node.name, node="failed", cordoned=True, detail=detail)
        log.warning("node %s failed (%s): cordoned", node.name, detail)


def override(npu: Npu, state: str, user, note: str = "") -> Npu:
    """An admin sets an NPU's health state (`ok`: mark healthy / uncordon it; or `suspect`, `failed`). The
    signals it shows now are forgiven by the policy until they go away; a new one counts as usual."""
    if state not in NpuHealthState.values:
        raise HealthStateError(f"state must be one of {', '.join(NpuHealthState.values)}, not {state!r}")
    detail = (note or "").strip()[:500] or f"set by {user.get_username()}"
    change = {"npu_id": npu.npu_id, "chip_id": npu.chip_id, "old": npu.health_state, "new": state}
    standing = list((npu.health_reason or {}).get("keys", []))  # the signals that put it where it is
    if npu.health_state != state:
        apply_changes(npu.node_id, [{**change, "signal": npu_health.ADMIN, "detail": detail}], user=user)
    field = chip_field(npu.npu_id, npu.chip_id)
    key = memory_key(npu.node.name)
    redis = panel_redis.client()
    if not redis.hexists(key, LOADED):  # else the next ingest would read the states afresh, forgetting this
        loaded: dict[FieldT, EncodableT] = {LOADED: "1"}
        loaded.update(_load_states([npu.node_id])[npu.node_id])
        redis.hset(key, mapping=loaded)
    raw = redis.hget(key, field)
    entry = json.loads(raw) if isinstance(raw, str) else {"memory": {}}
    latest = (entry.get("memory") or {}).get("last_chip") or {"npu_id": npu.npu_id, "chip_id": npu.chip_id}
    memory = npu_health.overridden(entry.get("memory"), latest, time.time())
    memory["forgiven"] = sorted(set(memory["forgiven"]) | set(standing))
    redis.hset(key, field, json.dumps({"state": state, "memory": memory}, sort_keys=True))
    npu.refresh_from_db()
    return npu
