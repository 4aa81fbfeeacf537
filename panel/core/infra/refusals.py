"""What the panel refuses, and the nonces it has seen.

Every message refused for its signature, its sender, its age or as a replay is logged and counted by kind and
reason (`panel_rejected_messages_total{kind,reason}` on /metrics). A signed message's nonce
(workers.identity) is remembered in the panel's Redis for as long as the message counts: SET NX with that
TTL is the atomic "first sight" shared by every panel worker.
"""

import logging
from collections.abc import Sequence

from panel.core.infra import panel_redis

log = logging.getLogger(__name__)

REJECTED_KEY = "panel:rejected-messages"
NONCE_PREFIX = "panel:nonce:"


def refuse(kind: str, sender: str, message: str, reason: str = "signature") -> None:
    """Log and count a refused message; never raises (a broken Redis must not hide the refusal's log)."""
    log.warning("refused %s from %r (%s): %s", kind, sender, reason, message)
    try:
        panel_redis.client().hincrby(REJECTED_KEY, f"{kind}:{reason}", 1)
    except Exception:  # counting is best effort; the log line above is the record
        log.exception("could not count a refused message")


def refuse_tally(kind: str, tally: dict[tuple[str, str], int], example: str) -> None:
    """Count what one drain refused, {(sender, reason): n}: one log line and one Redis round trip for the
    lot, so a flood of junk costs the panel a counter, not a log line and a round trip per line."""
    if not tally:
        return
    worst = max(tally, key=lambda sender_reason: tally[sender_reason])
    log.warning(
        "refused %d %s lines from %d senders (most: %d from %r, %s): %s",
        sum(tally.values()),
        kind,
        len(tally),
        tally[worst],
        worst[0],
        worst[1],
        example,
    )
    try:
        pipe = panel_redis.client().pipeline(transaction=False)
        for reason in {reason for _, reason in tally}:
            pipe.hincrby(
                REJECTED_KEY, f"{kind}:{reason}", sum(n for (_, r), n in tally.items() if r == reason)
            )
        pipe.execute()
    except Exception:
        log.exception("could not count refused %s lines", kind)


def rejected_by_reason() -> dict[tuple[str, str], int]:
    counts = panel_redis.hgetall(REJECTED_KEY)
    found: dict[tuple[str, str], int] = {}
    for field, value in counts.items():
        kind, _, reason = field.partition(":")
        found[kind, reason or "signature"] = found.get((kind, reason or "signature"), 0) + int(value)
    return found


def rejected_counts() -> dict[str, int]:
    """Refusals by kind, whatever the reason."""
    totals: dict[str, int] = {}
    for (kind, _reason), count in rejected_by_reason().items():
        totals[kind] = totals.get(kind, 0) + count
    return totals


def _nonce_key(signer: str, stamp) -> str:
    return f"{NONCE_PREFIX}{signer}:{stamp.nonce}"


def first_sight(signer: str, stamp) -> bool:
    """True the first time the panel sees this signer's nonce (workers.identity.Stamp); False for a replay."""
    return bool(panel_redis.client().set(_nonce_key(signer, stamp), 1, nx=True, ex=_ttl(stamp)))


def first_sights(items: Sequence[tuple[str, object]]) -> list[bool]:
    """first_sight for many (signer, stamp) at once: one round trip for a whole metrics drain."""
    pipe = panel_redis.client().pipeline(transaction=False)
    for signer, stamp in items:
        pipe.set(_nonce_key(signer, stamp), 1, nx=True, ex=_ttl(stamp))
    return [bool(answer) for answer in pipe.execute()]


def _ttl(stamp) -> int:
    return max(1, int(stamp.remember_s()) + 1)


# --- panel state read back from Redis ------------------------------------------------------------------
# Cache values that are not JSON, gateway entries the panel did not write, usage items that do not parse
# (`panel_rejected_state_total{kind}` on /metrics). Counting is best effort and never raises: the warning
# the refuser logs is the record.

STATE_KEY = "panel:rejected-state"


def count_state(client, kind: str, n: int = 1) -> None:
    """Add `n` refusals of `kind` on `client` (a synchronous redis client)."""
    try:
        client.hincrby(STATE_KEY, kind, n)
    except Exception:  # a Redis that went away must not turn a refusal into an error
        log.exception("could not count %d refused %s entries", n, kind)


def state_counts(client) -> dict[str, int]:
    found = client.hgetall(STATE_KEY)
    return {(k.decode() if isinstance(k, bytes) else k): int(v) for k, v in found.items()}
