"""Who sent a message: every message between the panel and an agent is signed with the credential of the
node it is about, so that broker access alone commands nothing.

Each node has its own key (issued at join, rotated on re-join, gone on removal; see panel.nodes.trust). An
agent signs what it sends the panel with its key; the panel signs each task it sends an agent with that
node's key, and the agent checks it before running anything. The central agent, which runs the tasks of
SSH nodes, signs and verifies with a key derived from the secrets key it shares with the panel. A client
holding node A's key can therefore neither make node B's agent or the central agent run anything, nor
speak for node B: the receiving side verifies.

HMAC-SHA256 over the message's canonical JSON (sorted keys): cheap enough for the metrics path.
"""

import hashlib
import hmac
import os
import threading

import orjson

from workers.sealing import key_material_from_env

CENTRAL = "central"
CENTRAL_ENV = "ASCEND_PANEL_CENTRAL"  # set by `python -m workers.agent --central` for its own process
AUTH_KWARG = "_auth"


class Untrusted(Exception):
    """A message whose signature does not verify, or that speaks for a node its signer is not."""


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
    return derive(material, "ascend-panel central agent v1")


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
    for the node ASCEND_PANEL_NODE_NAME. The central agent (ASCEND_PANEL_CENTRAL=1) derives the central key
    from the secrets key it shares with the panel (workers.sealing.key_material_from_env)."""
    with _lock:
        if signer in _keyring:
            return _keyring[signer]
        provider = _provider
    if provider is not None:
        return provider(signer)
    key = None
    if signer == CENTRAL and os.environ.get(CENTRAL_ENV) == "1":
        material = key_material_from_env()
        key = central_key(material) if material else None
    elif signer and signer == os.environ.get("ASCEND_PANEL_NODE_NAME", "").strip():
        key = agent_key_from_env()
    if key is not None:
        with _lock:
            _keyring[signer] = key
    return key


def signing_key(signer: str) -> bytes:
    key = key_for(signer)
    if key is None:
        if signer == CENTRAL:
            raise Untrusted("the central agent needs PANEL_SECRETS_KEY (or SECRET_KEY) to sign and verify")
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
    return {
        "node": node,
        "signer": signer,
        "body": body,
        "sig": signature(signing_key(signer), task_name.encode(), node.encode(), canonical(body)),
    }


def metrics_line(signer: str, raw: bytes) -> bytes:
    """A metrics batch as the inbox carries it: signer, signature and the batch's JSON, space separated."""
    return b"%s %s %s" % (signer.encode(), signature(signing_key(signer), b"metrics", raw).encode(), raw)


def split_metrics_line(line: bytes) -> tuple[str, str, bytes]:
    signer, sig, raw = line.split(b" ", 2)
    return signer.decode(), sig.decode(), raw


# --- panel → agent -----------------------------------------------------------------------------------


def task_parts(task_name: str, task_id: str, node: str, kwargs: dict) -> tuple[bytes, ...]:
    unsigned = {k: v for k, v in kwargs.items() if k != AUTH_KWARG}
    return task_name.encode(), task_id.encode(), node.encode(), canonical(unsigned)


def task_auth(key: bytes, signer: str, task_name: str, task_id: str, node: str, kwargs: dict) -> dict:
    """The `_auth` kwarg the panel adds to a task for `node`'s agent (or the central agent)."""
    return {
        "signer": signer,
        "node": node,
        "sig": signature(key, *task_parts(task_name, task_id, node, kwargs)),
    }


def check_task(task_name: str, task_id: str, kwargs: dict) -> str:
    """Verify a task this process received; returns the node it is for. Raises Untrusted."""
    auth = kwargs.get(AUTH_KWARG)
    if not isinstance(auth, dict):
        raise Untrusted(f"task {task_name} carries no signature")
    signer, node = str(auth.get("signer", "")), str(auth.get("node", ""))
    if signer != CENTRAL and node != signer:
        raise Untrusted(f"task {task_name} for node {node!r} is signed as {signer!r}")
    key = key_for(signer)
    if key is None:
        raise Untrusted(f"task {task_name} is for {signer!r}, whose key this agent does not hold")
    if not verify(key, str(auth.get("sig", "")), *task_parts(task_name, task_id, node, kwargs)):
        raise Untrusted(f"task {task_name} for {node!r} has a signature this agent's key does not verify")
    target = kwargs.get("target")
    if signer == CENTRAL and not (isinstance(target, dict) and target.get("node") == node):
        raise Untrusted(f"task {task_name} for the central agent must name its SSH node {node!r}")
    if signer != CENTRAL and target is not None:
        raise Untrusted(f"task {task_name} for node {node!r} may not carry an SSH target")
    return node
