"""Who sent a message: every message between the panel and an agent is signed with the credential of the
node it is about, so that broker access alone commands nothing.

Each node has its own key (issued at join, rotated on re-join, gone on removal; see panel.nodes.agents.trust).
An agent signs what it sends the panel with its key; the panel signs each task it sends an agent with that
node's key, and the agent checks it before running anything. The central agent, which runs the tasks of
SSH nodes, holds the central key: the panel derives it one way from its key material and hands it over as
a credential (`manage.py agent_credential --central`), like a node's. A client holding node A's key can
therefore neither make node B's agent or the central agent run anything, nor speak for node B; nor can the
central key sign for an agent node or the panel, or yield any other key: the receiving side verifies.

Every signed message carries a stamp inside its signature: when it was signed, until when it counts, and a
nonce. A receiver refuses one whose expiry passed or that claims a time beyond a small clock skew ahead, and
remembers each nonce for as long as the message counts, so a captured message replayed later, or again at
once, does nothing (the panel keeps nonces in its Redis, an agent in its state directory: workers.nonces).
How long a message counts depends on its kind (VALIDITY_S): seconds for heartbeats and metrics, longer for
tasks and event batches, which may wait in the broker while their receiver is down.

HMAC-SHA256 over the stamp and the message's canonical JSON (sorted keys): cheap enough for the metrics path.
"""

import hashlib
import hmac
import os
import re
import secrets
import threading
import time
from typing import NamedTuple

import orjson

from workers.task_names import ASK_STILL_WANTED, HEARTBEAT, INGEST_DEPLOYMENT_PROBE, INGEST_EVENTS

CENTRAL = "central"
CENTRAL_ENV = "ASCEND_PANEL_CENTRAL"  # set by `python -m workers.agent --central` for its own process
AUTH_KWARG = "_auth"
# An operation's task carries which sending of it it is (signed with the rest): workers.asking asks whether
# that one is still wanted.
DISPATCH_KWARG = "_dispatch"


# A receiver's clock may trail the sender's by this much: a message "from the future" within it is fine.
CLOCK_SKEW_S = 5.0
# How long a message of each kind counts after it was signed. The sender stamps an expiry within this; a
# receiver refuses a stamp claiming longer, and remembers the nonce until the expiry (plus the skew).
VALIDITY_S = {
    "heartbeat": 10.0,  # a heartbeat older than this marks nothing online
    "metrics": 30.0,  # workers.metrics_inbox.MAX_AGE_S: after an outage the panel wants current figures
    "probe": 30.0,
    "ask": 30.0,  # an agent asking whether an attempt is still wanted (workers.asking)
    # Event batches wait in the broker while the panel worker is down and must not be lost then.
    "event_batch": 24 * 3600.0,
    # Panel → agent: each task's own expiry is set by the panel (an operation's pickup deadline, two reconcile
    # intervals for a probe); this is the longest any may claim.
    "task": 24 * 3600.0,
    # The panel's own tasks, signed with the panel's key (panel.core.infra.panel_tasks).
    "panel_task": 3600.0,
}
DEFAULT_TASK_VALIDITY_S = 900.0
# What each agent → panel task carries, for its validity.
ENVELOPE_KINDS = {
    HEARTBEAT: "heartbeat",
    INGEST_EVENTS: "event_batch",
    INGEST_DEPLOYMENT_PROBE: "probe",
    ASK_STILL_WANTED: "ask",
}
_NONCE = re.compile(r"[0-9a-f]{16,64}")


class Untrusted(Exception):
    """A message whose signature does not verify, that speaks for a node its signer is not, or that is stale
    or replayed. `reason` is one word for the refusal counters: signature, sender, stale, future, replayed,
    malformed."""

    def __init__(self, message: str, reason: str = "signature"):
        super().__init__(message)
        self.reason = reason


class Stamp(NamedTuple):
    """When a message was signed and until when it counts (Unix seconds), and its nonce."""

    issued: float
    expires: float
    nonce: str

    def remember_s(self, now: float | None = None) -> float:
        """How long a receiver must remember the nonce: until no clock may take the message as fresh."""
        return max(1.0, self.expires + CLOCK_SKEW_S - (time.time() if now is None else now))


def new_stamp(validity_s: float, now: float | None = None) -> str:
    """A stamp for a message signed now that counts for validity_s: "issued_ms:expires_ms:nonce"."""
    now = time.time() if now is None else now
    return f"{int(now * 1000)}:{int((now + validity_s) * 1000)}:{secrets.token_hex(12)}"


def fresh_stamp(stamp: str, kind: str, now: float | None = None) -> Stamp:
    """The stamp of a (verified) message that still counts, or raises Untrusted saying why not."""
    try:
        issued_ms, expires_ms, nonce = str(stamp).split(":")
        issued, expires = int(issued_ms) / 1000, int(expires_ms) / 1000
    except ValueError:
        raise Untrusted("the message carries no time stamp", "malformed") from None
    if not _NONCE.fullmatch(nonce) or not 0 <= expires - issued <= VALIDITY_S[kind]:
        raise Untrusted(f"the stamp is malformed or claims longer than a {kind} may count", "malformed")
    now = time.time() if now is None else now
    if issued > now + CLOCK_SKEW_S:
        raise Untrusted(
            f"signed {issued - now:.0f} s in the future: the sender's clock is ahead (check chrony or NTP on "
            "the node and the panel)",
            "future",
        )
    if expires + CLOCK_SKEW_S < now:
        raise Untrusted(f"expired {now - expires:.0f} s ago (signed {now - issued:.0f} s ago)", "stale")
    return Stamp(issued, expires, nonce)


def canonical(obj) -> bytes:
    return orjson.dumps(obj, option=orjson.OPT_SORT_KEYS)


def signature(key: bytes, *parts: bytes) -> str:
    return hmac.new(key, b"\n".join(parts), hashlib.sha256).hexdigest()


def verify(key: bytes, sig: str, *parts: bytes) -> bool:
    return hmac.compare_digest(signature(key, *parts), str(sig))


def derive(material: str, purpose: str) -> bytes:
    """A key for `purpose` from a shared secret: what the panel and the central agent both compute."""
    return hmac.new(material.encode(), purpose.encode(), hashlib.sha256).digest()


def central_key(material: str) -> bytes:
    """The central agent's credential, as text like a node's (it goes into a file, and workers.sealing
    derives the key that seals what the central agent opens from it)."""
    return derive(material, "ascend-panel central agent v1").hex().encode()


# --- the keys this process holds ----------------------------------------------------------------------

_lock = threading.Lock()
_keyring: dict[str, bytes] = {}
_provider = None


def use_keys(keys: dict[str, bytes] | None = None, provider=None) -> None:
    """Set the keys this process holds ({signer: key}), or a provider(signer) -> key | None (tests, whose
    in-process worker plays both agents); None resets to what the environment says."""
    global _provider
    with _lock:
        _keyring.clear()
        _keyring.update(keys or {})
        _provider = provider


def key_for(signer: str) -> bytes | None:
    """This process's key for `signer` (its node's name, or CENTRAL), or None when it holds none.

    An agent holds its node's key: ASCEND_PANEL_AGENT_KEY (or the file ASCEND_PANEL_AGENT_KEY_FILE names),
    for the node ASCEND_PANEL_NODE_NAME. The central agent (ASCEND_PANEL_CENTRAL=1) holds the central key
    in the same variables."""
    with _lock:
        if signer in _keyring:
            return _keyring[signer]
        provider = _provider
    if provider is not None:
        return provider(signer)
    central = os.environ.get(CENTRAL_ENV) == "1"
    own = CENTRAL if central else os.environ.get("ASCEND_PANEL_NODE_NAME", "").strip()
    key = agent_key_from_env() if signer and signer == own else None
    if key is not None:
        with _lock:
            _keyring[signer] = key
    return key


def signing_key(signer: str) -> bytes:
    key = key_for(signer)
    if key is None:
        if signer == CENTRAL:
            raise Untrusted(
                "the central agent holds no credential: write it on the panel with `manage.py "
                "agent_credential --central --dir DIR` and set ASCEND_PANEL_AGENT_KEY_FILE=DIR/central.key"
            )
        raise Untrusted(
            f"this agent holds no credential for node {signer!r}: set ASCEND_PANEL_AGENT_KEY (the join "
            "command writes it to /etc/ascend-panel/agent.env) or ASCEND_PANEL_AGENT_KEY_FILE"
        )
    return key


def agent_key_from_env(environ=os.environ) -> bytes | None:
    path = environ.get("ASCEND_PANEL_AGENT_KEY_FILE", "")
    if path:
        with open(path) as handle:
            key = handle.read().strip()
    else:
        key = environ.get("ASCEND_PANEL_AGENT_KEY", "").strip()
    return key.encode() if key else None


# --- agent → panel -----------------------------------------------------------------------------------


def seal_for_panel(task_name: str, node: str, body: dict, signer: str | None = None) -> dict:
    """The envelope an agent sends: the body, the node it is about, who signed it and the signature. The
    signer is the node itself, or CENTRAL for what the central agent sends about an SSH node."""
    signer = signer or node
    stamp = new_stamp(VALIDITY_S[ENVELOPE_KINDS[task_name]])
    return {
        "node": node,
        "signer": signer,
        "body": body,
        "stamp": stamp,
        "sig": signature(signing_key(signer), *envelope_parts(stamp, task_name, node, body)),
    }


def envelope_parts(stamp: str, task_name: str, node: str, body: dict | None) -> tuple[bytes, ...]:
    return stamp.encode(), task_name.encode(), node.encode(), canonical(body)


def open_envelope_seal(key: bytes, task_name: str, envelope: dict) -> Stamp:
    """The stamp of an agent's envelope whose signature verifies with `key` and that still counts for its
    kind; raises Untrusted. The caller checks the nonce was not seen before."""
    stamp = str(envelope.get("stamp", ""))
    parts = envelope_parts(stamp, task_name, str(envelope.get("node", "")), envelope.get("body"))
    if not verify(key, str(envelope.get("sig", "")), *parts):
        raise Untrusted("signature does not verify with the node's credential")
    return fresh_stamp(stamp, ENVELOPE_KINDS[task_name])


# What the inbox (workers.metrics_inbox) carries: metrics batches and, since they come as often, heartbeats.
# The kind ("metrics" or "heartbeat") is signed with the line, so a captured metrics batch cannot pass for a
# heartbeat.
HEARTBEAT_LINE_START = b'{"heartbeat":'  # workers.contracts.HeartbeatLine's JSON


def inbox_line(signer: str, raw: bytes, kind: str = "metrics") -> bytes:
    """A message as the inbox carries it: signer, seal and its JSON, space separated. The seal is the stamp
    and the signature over the kind, it and the JSON: "stamp/signature"."""
    stamp = new_stamp(VALIDITY_S[kind]).encode()
    sig = signature(signing_key(signer), kind.encode(), stamp, raw).encode()
    return b"%s %s/%s %s" % (signer.encode(), stamp, sig, raw)


def split_inbox_line(line: bytes) -> tuple[str, str, bytes]:
    """(signer, seal, JSON) of an inbox line; the seal is checked by open_inbox_seal."""
    signer, seal, raw = line.split(b" ", 2)
    return signer.decode(), seal.decode(), raw


def inbox_kind(raw: bytes) -> str:
    """Which kind an inbox line's JSON claims to be; its seal must then verify for that kind."""
    return "heartbeat" if raw.startswith(HEARTBEAT_LINE_START) else "metrics"


def open_inbox_seal(
    key: bytes, seal: str, raw: bytes, now: float | None = None, kind: str = "metrics"
) -> Stamp:
    """The stamp of an inbox line of `kind` whose seal verifies with `key` and that still counts; raises
    Untrusted."""
    stamp, _, sig = seal.partition("/")
    if not verify(key, sig, kind.encode(), stamp.encode(), raw):
        raise Untrusted("signature does not verify with the node's credential")
    return fresh_stamp(stamp, kind, now)


# --- panel → agent -----------------------------------------------------------------------------------


def task_parts(stamp: str, task_name: str, task_id: str, node: str, kwargs: dict) -> tuple[bytes, ...]:
    unsigned = {k: v for k, v in kwargs.items() if k != AUTH_KWARG}
    return stamp.encode(), task_name.encode(), task_id.encode(), node.encode(), canonical(unsigned)


def task_auth(
    key: bytes,
    signer: str,
    task_name: str,
    task_id: str,
    node: str,
    kwargs: dict,
    validity_s: float = DEFAULT_TASK_VALIDITY_S,
) -> dict:
    """The `_auth` kwarg the panel adds to a task for `node`'s agent (or the central agent). Every sending,
    a re-sent operation's included, is stamped anew."""
    stamp = new_stamp(min(validity_s, VALIDITY_S["task"]))
    return {
        "signer": signer,
        "node": node,
        "stamp": stamp,
        "sig": signature(key, *task_parts(stamp, task_name, task_id, node, kwargs)),
    }


class TaskSeal(NamedTuple):
    node: str
    signer: str
    stamp: Stamp


def check_task(task_name: str, task_id: str, kwargs: dict, first_sight=None) -> TaskSeal:
    """Verify a task this process received: signed for a node whose key this process holds, still fresh, and
    (when `first_sight(signer, stamp)` is given) never seen before. Raises Untrusted."""
    auth = kwargs.get(AUTH_KWARG)
    if not isinstance(auth, dict):
        raise Untrusted(f"task {task_name} carries no signature")
    signer, node = str(auth.get("signer", "")), str(auth.get("node", ""))
    if signer != CENTRAL and node != signer:
        raise Untrusted(f"task {task_name} for node {node!r} is signed as {signer!r}", "sender")
    key = key_for(signer)
    if key is None:
        raise Untrusted(f"task {task_name} is for {signer!r}, whose key this agent does not hold", "sender")
    stamp_text = str(auth.get("stamp", ""))
    if not verify(key, str(auth.get("sig", "")), *task_parts(stamp_text, task_name, task_id, node, kwargs)):
        raise Untrusted(f"task {task_name} for {node!r} has a signature this agent's key does not verify")
    try:
        stamp = fresh_stamp(stamp_text, "task")
    except Untrusted as why:
        raise Untrusted(f"task {task_name} for {node!r}: {why}", why.reason) from None
    target = kwargs.get("target")
    if signer == CENTRAL and not (isinstance(target, dict) and target.get("node") == node):
        raise Untrusted(f"task {task_name} for the central agent must name its SSH node {node!r}", "sender")
    if signer != CENTRAL and target is not None:
        raise Untrusted(f"task {task_name} for node {node!r} may not carry an SSH target", "sender")
    if first_sight is not None and not first_sight(signer, stamp):
        raise Untrusted(f"task {task_name} for {node!r} was delivered before (a replay)", "replayed")
    return TaskSeal(node, signer, stamp)
