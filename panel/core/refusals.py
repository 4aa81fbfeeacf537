"""Counts of panel state read back from Redis and refused: cache values that are not JSON, gateway entries
the panel did not write, usage items that do not parse (`panel_rejected_state_total{kind}` on /metrics).

Counting is best effort and never raises: the warning the refuser logs is the record."""

import logging

log = logging.getLogger(__name__)

KEY = "panel:rejected-state"


def count(client, kind: str, n: int = 1) -> None:
    """Add `n` refusals of `kind` on `client` (a synchronous redis client)."""
    try:
        client.hincrby(KEY, kind, n)
    except Exception:  # a Redis that went away must not turn a refusal into an error
        log.exception("could not count %d refused %s entries", n, kind)


def counts(client) -> dict[str, int]:
    found = client.hgetall(KEY)
    return {(k.decode() if isinstance(k, bytes) else k): int(v) for k, v in found.items()}
