"""How many agent messages the panel refused, by kind (panel.nodes.trust decides; /metrics shows the counts
as panel_rejected_messages). Counted in Redis so every panel process adds to one tally."""

from panel.monitoring import store

REJECTED_KEY = "panel:rejected-messages"


def count(kind: str) -> None:
    store.client().hincrby(REJECTED_KEY, kind, 1)


def rejected_counts() -> dict[str, int]:
    counts = store.client().hgetall(REJECTED_KEY)
    return {(k.decode() if isinstance(k, bytes) else k): int(v) for k, v in counts.items()}
