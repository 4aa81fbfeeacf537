"""The panel's side of agent identity (workers.identity): each node's key, checking what agents send, and
signing what the panel sends them.

A message is accepted only when its signature verifies with the key of the node it speaks for (or, for an
SSH node, the central agent's key), while its stamp is fresh and its nonce unseen (workers.identity,
panel.core.infra.refusals), and then only for that node's rows: ingest functions compare the node an event
batch or probe result touches with the sender. Everything refused is logged and counted by kind and reason
(`panel_rejected_messages_total` on /metrics).
"""

import logging
import threading
import time
from functools import lru_cache

from panel.core.domain.choices import NodeTransport
from panel.core.infra.refusals import first_sight, first_sights, refuse, rejected_counts
from panel.core.infra.secrets import key_material
from panel.core.models import one_or_none
from panel.nodes.agents.ssh import panel_central_key, task_route
from panel.nodes.models import Node
from workers.celery_app import app as celery_app
from workers.identity import (
    AUTH_KWARG,
    CENTRAL,
    DEFAULT_TASK_VALIDITY_S,
    ENVELOPE_KINDS,
    Untrusted,
    derive,
    fresh_stamp,
    open_envelope_seal,
    open_inbox_seal,
    task_auth,
)
from workers.topology import agent_queue, route

log = logging.getLogger(__name__)

__all__ = ["panel_central_key", "refuse", "rejected_counts"]  # re-exported: what every ingest path calls


class Refused(Exception):
    """A message the panel does not accept from its sender (already logged and counted)."""


def _material() -> str:
    return key_material()


def agent_key(node) -> bytes:
    """Node `node`'s credential: what its agent signs with and verifies the panel's tasks by."""
    return _derived_agent_key(_material(), node.name, node.credential_id)


@lru_cache(maxsize=4096)
def _derived_agent_key(material: str, name: str, credential_id: str) -> bytes:
    # Cached: the metrics path asks for every node's key several times a second. A rotated or revoked
    # credential has another id (or no row), so a cached key never outlives its credential.
    return derive(material, f"ascend-panel agent {name} {credential_id}").hex().encode()


def _key_of(signer: str, node) -> bytes:
    if signer == CENTRAL:
        # Nodes reached over SSH: still SSH nodes, or ones whose agent the central agent just installed
        # (its last events may arrive after the new agent's first heartbeat made the node an agent node).
        if not node.ssh_username:
            raise Untrusted(
                f"the central agent speaks only for nodes it reaches over SSH, not {node.name}", "sender"
            )
        return panel_central_key()
    if signer != node.name:
        raise Untrusted(f"signed by {signer!r} but speaks for {node.name!r}", "sender")
    return agent_key(node)


def open_envelope(kind: str, task_name: str, envelope, *, redelivered: bool = False) -> tuple:
    """(node, signer, body) of a signed agent message that is fresh and seen for the first time, or raises
    Refused (logged and counted). `redelivered`: the broker says it delivered this very message before without
    an ack (a panel worker killed mid-task, after it had recorded the nonce): its nonce was seen by that
    delivery, so it is no replay. The flag is the broker's, never the sender's; a replay is a new publish."""
    sender = envelope.get("signer", "?") if isinstance(envelope, dict) else "?"
    try:
        if not isinstance(envelope, dict) or not isinstance(envelope.get("body"), dict):
            raise Untrusted("not a signed envelope", "malformed")
        name, signer, body = str(envelope.get("node", "")), str(envelope.get("signer", "")), envelope["body"]
        # Its time before its signature: what comes too late (a panel worker behind after a burst) is refused
        # without a query, so a backlog drains faster instead of slower. A fresh one is checked again signed.
        fresh_stamp(str(envelope.get("stamp", "")), ENVELOPE_KINDS[task_name])
        node = one_or_none(Node.objects.filter(name=name))
        if node is None:
            raise Untrusted(f"no node named {name!r} (removed, or never added)", "sender")
        stamp = open_envelope_seal(_key_of(signer, node), task_name, envelope)
        if body.get("node", name) != name:
            raise Untrusted(f"envelope for {name!r} carries a message about {body.get('node')!r}", "sender")
        if not first_sight(signer, stamp) and not redelivered:
            raise Untrusted("seen before: a replay", "replayed")
    except Untrusted as error:
        refuse(kind, sender, str(error), error.reason)
        raise Refused(str(error)) from None
    return node, signer, body


class _CredentialCache:
    """Nodes' credential ids for the metrics path, read at most every CACHE_S seconds: a drain several times
    a second would otherwise pay a query each (most of the verification's cost). A rotated or revoked
    credential therefore stops verifying metrics within CACHE_S; events, probes and heartbeats, which change
    state, always read the row."""

    CACHE_S = 5.0

    def __init__(self):
        self._lock = threading.Lock()
        self._nodes: dict = {}
        self._read_at = float("-inf")

    def lookup(self, names: set[str]) -> dict:
        with self._lock:
            stale = time.monotonic() - self._read_at > self.CACHE_S
            if stale or not names <= self._nodes.keys():
                wanted = names if not stale else names | self._nodes.keys()
                found = Node.objects.filter(name__in=wanted).only("name", "credential_id", "ssh_username")
                fresh = {name: None for name in wanted}  # unknown names are remembered as unknown too
                fresh.update({node.name: node for node in found})
                self._nodes = fresh if stale else {**self._nodes, **fresh}
                if stale:
                    self._read_at = time.monotonic()
            return {name: self._nodes.get(name) for name in names}

    def forget(self) -> None:
        with self._lock:
            self._nodes, self._read_at = {}, float("-inf")


_credentials = _CredentialCache()


def forget_credentials(sender=None, instance=None, created=False, update_fields=None, **kwargs) -> None:
    """A node was added, removed or given a new credential here: the metrics path reads them again."""
    if update_fields is None or "credential_id" in update_fields or created:
        _credentials.forget()


def trusted_metrics(lines: list[tuple[str, str, bytes, str]]) -> list[bool]:
    """For each (signer, seal, batch JSON, node the batch is about) of one inbox drain: whether its seal
    verifies with that node's credential, is fresh and was not seen before. One query (often none: the
    credential cache) and one Redis round trip for the whole drain; refusals are counted."""
    return _trusted_lines("metrics", lines, _credentials.lookup({line[3] for line in lines}))


# What trusted_heartbeats reads of each node: its credential (_key_of) and what a steady beat compares.
HEARTBEAT_COLUMNS = (
    *("name", "credential_id", "ssh_username", "status", "transport", "inventoried_at"),
    *("heartbeat_interval", "agent_version", "agent_running", "agent_done"),
)


def trusted_heartbeats(lines: list[tuple[str, str, bytes, str]]) -> tuple[list[bool], dict]:
    """trusted_metrics for the heartbeats of one inbox drain, and the rows of the nodes they are about. A
    heartbeat changes state, so the rows are read now, not from the credential cache: one query, of the
    columns the check and a steady heartbeat read (panel.nodes.services.record_drained_heartbeats; the locked
    path reads its row whole again), not the inventory's facts and raw npu-smi text of every node."""
    found = Node.objects.filter(name__in={line[3] for line in lines}).only(*HEARTBEAT_COLUMNS)
    nodes = {node.name: node for node in found}
    return _trusted_lines("heartbeat", lines, nodes), nodes


def _trusted_lines(kind: str, lines: list[tuple[str, str, bytes, str]], nodes: dict) -> list[bool]:
    keys: dict[tuple[str, str], bytes | None] = {}
    stamps = []
    for signer, seal, raw, name in lines:
        if (signer, name) not in keys:
            try:
                node = nodes.get(name)
                if node is None:
                    raise Untrusted(f"no node named {name!r}", "sender")
                keys[signer, name] = _key_of(signer, node)
            except Untrusted as error:
                refuse(kind, signer, str(error), error.reason)
                keys[signer, name] = None
        key = keys[signer, name]
        stamp = None
        if key is not None:
            try:
                stamp = open_inbox_seal(key, seal, raw, kind=kind)
            except Untrusted as error:
                refuse(kind, signer, f"{kind} about {name!r}: {error}", error.reason)
        stamps.append(stamp)
    fresh = [(line[0], stamp) for line, stamp in zip(lines, stamps, strict=True) if stamp is not None]
    unseen = iter(first_sights(fresh) if fresh else [])
    verdicts = []
    for (signer, _seal, _raw, name), stamp in zip(lines, stamps, strict=True):
        ok = stamp is not None and next(unseen)
        if stamp is not None and not ok:
            refuse(kind, signer, f"{kind} about {name!r} seen before: a replay", "replayed")
        verdicts.append(ok)
    return verdicts


def task_signing_key(node) -> bytes:
    """The key tasks for `node` are signed with: its agent's, or the central agent's for an SSH node. What
    is sealed for the agent that runs a node's tasks is sealed with it too (workers.sealing.seal_for_node)."""
    return panel_central_key() if node.transport == NodeTransport.SSH else agent_key(node)


def send_agent_task(node, task_name: str, kwargs: dict, *, task_id: str | None = None, **options) -> None:
    """Send `task_name` to the agent of `node` (or the central agent for an SSH node), signed so that the
    receiving agent can tell it comes from the panel, is meant for that node and still counts: its signed
    expiry is the `expires` option (seconds) when given. Each call signs anew, so a re-sent operation is a
    new message, never a replay of the old one."""
    queue, route_kwargs = task_route(node)
    kwargs = {**kwargs, **route_kwargs}
    signer = CENTRAL if "target" in route_kwargs else node.name
    key = task_signing_key(node)
    task_id = task_id or _new_task_id()
    validity_s = float(options.get("expires") or DEFAULT_TASK_VALIDITY_S)
    kwargs[AUTH_KWARG] = task_auth(key, signer, task_name, task_id, node.name, kwargs, validity_s)
    options = {**route(agent_queue(queue)), **options}
    celery_app.send_task(task_name, kwargs=kwargs, task_id=task_id, **options)


def _new_task_id() -> str:
    import uuid

    return str(uuid.uuid4())
