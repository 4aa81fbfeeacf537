"""A deployment's `autoscale:` as the spec writes it, checked, and as the policy reads it.

    autoscale:
      min: 1
      max: 4
      target: {waiting_per_replica: 4}     # exactly one of ttft_p90_ms, waiting_per_replica, kv_usage
      up_after_s: 30                       # the figure stays above target this long: one replica more
      down_after_s: 300                    # this long's load fits one fewer: one replica fewer

While it is set the replica count is the autoscaler's, within [min, max]: the spec's `replicas` may be left
out (the current count stays) and one outside the range is refused.

`min: 0` (only with `idle:`) is scale-to-zero without a cold start: the autoscaler never removes the last
engine row; its step from one to zero puts that engine to sleep (a `sleep` decision), and the first request
wakes it through the gateway's hold (a `wake` decision, panel/gateway/instances/wake.py). Zero is one engine
asleep, not none: a deleted engine would be a cold start (minutes on an NPU), a sleeping one wakes in seconds.

A disaggregated deployment scales each role on its own block, `roles.<role>.autoscale` (the top-level one is
refused there), on the figures of that role's engines alone. Not every target fits a role (ROLE_TARGETS):

- prefill keeps `ttft_p90_ms` or `waiting_per_replica`. A prefill engine answers each request with one
  token, so its time to first token is its queue plus the prefill (what the client waits before decode
  starts), and its waiting requests are prompts not yet computed. Not `kv_usage`: the connectors keep a
  finished prefill's blocks until the decode engine has pulled them (`request_finished` answers
  delay_free_blocks in vllm-ascend's MooncakeConnector and vLLM's Mooncake and NIXL connectors), so the
  figure measures the hand-over, not how busy the prefill is.
- decode keeps `waiting_per_replica` or `kv_usage`. A decode engine holds the KV cache of every answer it
  writes for the answer's whole length: its KV usage is its capacity, and its waiting requests wait for room
  (vLLM 0.32 leaves the requests it skipped, those still pulling their KV among them, out of
  `num_requests_waiting`). Not `ttft_p90_ms`: the first token a decode engine reports is timed from when
  the request reached it, and what the client waits for before it is mostly the prefill and the KV
  transfer, which more decode engines do not shorten.

A role keeps at least one engine (`min` 1 or more): every request needs a prefill and a decode.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from panel.core.domain.choices import DeploymentRole

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
# A window holds the probes that come in it, every PANEL_DEPLOY_RECONCILE_S (2 s by default): 2 s is one
# probe, the quickest up a bursty load may want (Kubernetes' HPA takes a scale-up at once by default).
WINDOW_BOUNDS_S = (2.0, 3600.0)
DEFAULT_UP_AFTER_S = 30.0
DEFAULT_DOWN_AFTER_S = 300.0
PREFILL, DECODE = DeploymentRole.PREFILL.value, DeploymentRole.DECODE.value
# The targets each role of a disaggregated deployment may scale on (the module docstring says why).
ROLE_TARGETS: dict[str, tuple[str, ...]] = {
    PREFILL: (TTFT_P90_MS, WAITING_PER_REPLICA),
    DECODE: (WAITING_PER_REPLICA, KV_USAGE),
}
CAUSE = "autoscale"  # the revision cause of the autoscaler's steps
ROLES_KEY = "roles"  # the primary's `autoscale` of a deployment with roles: {"roles": {role: block}}
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


def blocks_of(primary) -> dict[str, dict[str, Any]]:
    """{role: `autoscale:` block} of every count the autoscaler owns on `primary`: {"": block} for plain
    replicas, {"prefill": …, "decode": …} (the roles that have one) with roles; {} when none scales."""
    return blocks_in(primary.autoscale)


def blocks_in(stored: dict[str, Any] | None) -> dict[str, dict[str, Any]]:
    """blocks_of for what the `autoscale` column holds (or `stored_of` gives)."""
    if not stored:
        return {}
    if ROLES_KEY in stored:
        return {role: dict(block) for role, block in stored[ROLES_KEY].items() if block}
    return {"": dict(stored)}


def block_of(primary, role: str) -> dict[str, Any] | None:
    """The `autoscale:` block that owns the count of `role` ("" for plain replicas), or None."""
    return blocks_of(primary).get(role)


def stored_of(spec: dict[str, Any]) -> dict[str, Any] | None:
    """What the primary keeps in its `autoscale` column for a checked spec: the top-level block, or with
    roles {"roles": {role: block}} of the roles that scale; None when no count is the autoscaler's."""
    roles = spec.get("roles")
    if not roles:
        return spec.get("autoscale") or None
    scaled = {role: dict(entry["autoscale"]) for role, entry in roles.items() if entry.get("autoscale")}
    return {ROLES_KEY: scaled} if scaled else None
