"""What the gateway keeps in Redis, sealed by the panel: an entry is `<mac>.<json>`, the MAC an HMAC-SHA256
(cut to 128 bits) over the Redis key and the JSON, with a key derived from the panel's secrets key.

Redis is only as trusted as whoever can write to it. A pool entry names the engine (address and key) that
gets users' prompts, a caller entry says which API key may call; an entry someone else wrote (a rewritten
`gw:pool:<name>` pointing at their server, a `gw:caller:<sha256>` for a key the panel never issued) does
not carry a MAC that verifies, so it is refused without a database read and the answer comes from the
database instead. Cached entries carry their expiry inside the MAC too, so an entry the panel once wrote
and someone replays after it was dropped (a revoked key, an instance that left the pool) is refused once
that short TTL is over. The MAC binds the entry to its key: a valid pool entry moved under another name
does not verify either.

Opening costs one HMAC of a few hundred bytes (a few microseconds); nothing else runs on the hot path.
Refusals are logged and counted (`panel_rejected_state_total{kind="gateway-pool"|"gateway-caller"|
"gateway-usage"}`)."""

from __future__ import annotations

import hashlib
import hmac
import logging
import time
from functools import lru_cache

import orjson

from panel.core.infra import refusals
from panel.core.infra.secrets import key_material

log = logging.getLogger(__name__)

MAC_HEX = 32
# An entry's sealed expiry is a little after its Redis TTL, so an entry the panel wrote is gone from Redis
# before it would read as expired: only a replayed one does.
EXPIRY_GRACE_S = 2.0


@lru_cache(maxsize=4)
def _keyed(material: str) -> hmac.HMAC:
    """An HMAC keyed for gateway entries, copied per entry (cheaper than keying a new one each time)."""
    key = hmac.new(material.encode(), b"ascend-panel gateway redis entries", hashlib.sha256).digest()
    return hmac.new(key, digestmod=hashlib.sha256)


def _mac(redis_key: str, body: bytes) -> str:
    digest = _keyed(key_material()).copy()
    digest.update(redis_key.encode() + b"\0" + body)
    return digest.hexdigest()[:MAC_HEX]


def seal(redis_key: str, entry, ttl_s: float | None = None) -> str:
    """`entry` (JSON-ready) as the panel stores it under `redis_key`; valid for `ttl_s` when given."""
    wrapped = {"v": entry} if ttl_s is None else {"v": entry, "exp": time.time() + ttl_s + EXPIRY_GRACE_S}
    body = orjson.dumps(wrapped)
    return f"{_mac(redis_key, body)}.{body.decode()}"


class Unsealed(ValueError):
    """Redis held something under a gateway key that the panel did not write (or that expired)."""


def opened(redis_key: str, stored: str | bytes):
    """The entry the panel sealed under `redis_key`; Unsealed when it is not one (or it expired)."""
    if isinstance(stored, bytes):
        stored = stored.decode(errors="replace")
    mac, _, body = stored.partition(".")
    if len(mac) != MAC_HEX or not hmac.compare_digest(mac, _mac(redis_key, body.encode())):
        raise Unsealed(f"{redis_key}: the MAC does not verify")
    wrapped = orjson.loads(body)
    expires = wrapped.get("exp")
    if expires is not None and expires < time.time():
        raise Unsealed(f"{redis_key}: expired")
    return wrapped["v"]


async def refused(redis, kind: str, reason: str) -> None:
    """Log and count a refused entry on the gateway's async client; never raises."""
    log.warning("gateway refused a Redis entry (%s): %s", kind, reason)
    try:
        await redis.hincrby(refusals.STATE_KEY, kind, 1)
    except Exception:  # counting is best effort; the warning above is the record
        log.exception("could not count a refused gateway entry")
