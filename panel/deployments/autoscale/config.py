"""A deployment's `autoscale:` as the spec writes it, checked, and as the policy reads it.

    autoscale:
      min: 1
      max: 4
      target: {waiting_per_replica: 4}     # exactly one of ttft_p90_ms, waiting_per_replica, kv_usage
      up_after_s: 30                       # the figure stays above target this long: one replica more
      down_after_s: 300                    # one fewer fits this long: one replica fewer

While it is set the replica count is the autoscaler's, within [min, max]: the spec's `replicas` may be left
out (the current count stays) and one outside the range is refused.

`min: 0` (only with `idle:`) is scale-to-zero without a cold start: the autoscaler never removes the last
engine row; its step from one to zero puts that engine to sleep (a `sleep` decision), and the first request
wakes it through the gateway's hold (a `wake` decision, panel/gateway/instances/wake.py). Zero is one engine
asleep, not none: a deleted engine would be a cold start (minutes on an NPU), a sleeping one wakes in seconds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

TTFT_P90_MS = "ttft_p90_ms"
WAITING_PER_REPLICA = "waiting_per_replica"
KV_USAGE = "kv_usage"
# Each target: (lowest, highest) value a spec may give.
TARGET_BOUNDS: dict[str, tuple[float, float]] = {
    TTFT_P90_MS: (10.0, 600_000.0),
    WAITING_PER_REPLICA: (0.5, 10_000.0),
    KV_USAGE: (0.05, 1.0),
}
MAX_REPLICAS = 64  # as rollouts/replicas.py: each replica is a row and NPUs of its own
WINDOW_BOUNDS_S = (5.0, 3600.0)
DEFAULT_UP_AFTER_S = 30.0
DEFAULT_DOWN_AFTER_S = 300.0
# A replica runs this many sequences at once unless the spec's engine says --max-num-seqs (vLLM's default).
DEFAULT_CAPACITY = 256


@dataclass(frozen=True)
class Autoscale:
    min: int
    max: int
    target: str  # one of TARGET_BOUNDS
    value: float
    up_after_s: float
    down_after_s: float

    @classmethod
    def from_spec(cls, raw: dict[str, Any] | None) -> Autoscale | None:
        """The stored (already checked) `autoscale:`; None when the deployment has none."""
        if not raw:
            return None
        ((target, value),) = raw["target"].items()
        return cls(
            min=int(raw["min"]),
            max=int(raw["max"]),
            target=target,
            value=float(value),
            up_after_s=float(raw.get("up_after_s", DEFAULT_UP_AFTER_S)),
            down_after_s=float(raw.get("down_after_s", DEFAULT_DOWN_AFTER_S)),
        )

    @property
    def floor(self) -> int:
        """The fewest engine rows: min, and at least one (min 0 is that one asleep)."""
        return max(1, self.min)

    @property
    def to_zero(self) -> bool:
        """Whether the last engine sleeps when the load is gone (min 0)."""
        return self.min == 0

    def clamp(self, replicas: int) -> int:
        return max(self.floor, min(self.max, replicas))


def capacity_of(engine: dict[str, Any]) -> int:
    """Sequences one replica runs at once: the engine's --max-num-seqs, else vLLM's default."""
    flags = engine.get("extra_flags") or {}
    for name in ("max-num-seqs", "max_num_seqs", "--max-num-seqs"):
        value = flags.get(name)
        if isinstance(value, int | str) and str(value).isdigit() and int(value) > 0:
            return int(value)
    return DEFAULT_CAPACITY
