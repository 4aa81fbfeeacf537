"""When failover acts and when it holds back (issue 37 item 4): pure, on a clock passed in, so the rules are
tested on a fake one.

- Repeated faults: an NPU that failed `hold_after` times within `hold_window_s` is *held*: it stays out of
  service until an admin marks it healthy, whatever its signals say later (a chip that keeps failing is
  worse than one that failed once; Huawei's own MindCluster isolates a chip after repeated faults too).
- A node with `drain_node_at` or more NPUs failed at once is drained, with the reason: its board, power or
  fabric is the likelier culprit than each chip alone.
- Hysteresis, so a flapping link does not move a deployment back and forth: an NPU that came back is no
  target for a move until it stayed in service for `settle_s`, a held one never is, and a move for a link
  signal waits until the link stayed down for `link_confirm_s` (the gateway excludes the instance at once
  either way; only the costly re-placement waits). A deployment is never moved back because its old NPU
  recovered: failover moves work off failed NPUs only, it does not rebalance.
- A node that lost power (or its network) leaves no signal behind: only its silence. The heartbeat sweep
  marks it offline after three missed heartbeats (panel.nodes); once it stayed offline `node_offline_s`
  longer, its replicas are moved off it. The bound lets a short network blip or an agent's restart pass
  without a move (the gateway leaves its instances out at once either way). A node that comes back finds
  its old replicas running elsewhere and nothing is moved back to it, for the same reason as above.
- A multi-node replica (one engine over several nodes: DP, or TP across them) is one job: a part on a
  failed NPU or a lost node stops it all. It is re-placed as a whole: every part planned again, on its own
  nodes where they still fit and on others where not, with a surge copy first only where two copies fit
  (`surge_room`); else the replacement takes its place at once (it was not serving anyway).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class Thresholds:
    hold_after: int = 3
    hold_window_s: float = 24 * 3600.0
    drain_node_at: int = 2
    settle_s: float = 600.0
    # The health policy marks a link failed only after it stayed down 30 s (panel.nodes.health.npu_health,
    # MindCluster's rule), which already confirms it: nothing more to wait for by default. Kept as a knob
    # for a health policy that fails links faster.
    link_confirm_s: float = 0.0
    # How long a node stays offline (after the sweep marked it so) before its replicas move: the panel's
    # choice, so that with 5 s heartbeats (offline after 15 s) a lost node's replicas start elsewhere about
    # 30 s after its last word, within the minute, while an agent's restart (back in seconds) and
    # a blip shorter than that move nothing.
    node_offline_s: float = 15.0


DEFAULT = Thresholds()


def is_link_signal(signal: str) -> bool:
    """HCCS/RoCE link signals (down, flaps): the ones that come and go."""
    return "link" in (signal or "").lower()


def recent(failures: Iterable[float], now: float, t: Thresholds = DEFAULT) -> list[float]:
    """The failure times within the window, oldest first (what is kept of an NPU's history)."""
    return sorted(when for when in failures if now - t.hold_window_s <= when <= now)


def held(failures: Iterable[float], now: float, t: Thresholds = DEFAULT) -> bool:
    """Whether an NPU with these failure times stays out until an admin says otherwise."""
    return len(recent(failures, now, t)) >= t.hold_after


def drain_node(failed_npus: int, t: Thresholds = DEFAULT) -> bool:
    """Whether a node with this many failed NPUs is drained."""
    return failed_npus >= t.drain_node_at


@dataclass(frozen=True)
class NpuView:
    """What the policy needs of an NPU: its state, since when, and whether it is held."""

    state: str  # ok | suspect | failed (NpuHealthState)
    changed_at: float | None  # when its state last changed; None: never
    held: bool = False


def may_target(npu: NpuView, now: float, t: Thresholds = DEFAULT) -> bool:
    """Whether a move may put a replica on this NPU: in service, not held, and settled after a change."""
    if npu.state != "ok" or npu.held:
        return False
    return npu.changed_at is None or now - npu.changed_at >= t.settle_s


def move_now(signal: str, failed_since: float, now: float, t: Thresholds = DEFAULT) -> bool:
    """Whether a replica on an NPU failed since `failed_since` by `signal` is moved now: at once for a chip
    signal, after `link_confirm_s` for a link one (a link back up within it costs no move)."""
    if is_link_signal(signal):
        return now - failed_since >= t.link_confirm_s
    return True


def leave_now(
    npu: NpuView, signal: str, failed_since: float | None, now: float, t: Thresholds = DEFAULT
) -> bool:
    """Whether the replicas on this NPU are moved off it now: it is held (out until an admin says
    otherwise, even while its signals look fine), or it failed and `move_now` says so."""
    if npu.held:
        return True
    if npu.state != "failed":
        return False
    return move_now(signal, failed_since if failed_since is not None else now, now, t)


def node_lost(offline: bool, last_heard: float | None, now: float, silent_limit_s: float, t=DEFAULT) -> bool:
    """Whether the replicas on a node are moved off it now: it is offline (the sweep says so) and has been
    silent for its silent limit (what made it offline) plus `node_offline_s`; a node never heard from
    that is offline counts as lost."""
    if not offline:
        return False
    if last_heard is None:
        return True
    return now - last_heard >= silent_limit_s + t.node_offline_s


def surge_room(free_npus: Iterable[int], per_node: int, nodes: int) -> bool:
    """Whether a surge of a replica of `nodes` parts, `per_node` NPUs each, fits beside its replacement: two
    copies of it, each on `nodes` different nodes, on nodes with these free NPUs (the replica's own left
    out). A node takes at most one part of each copy, so it counts for at most two."""
    if per_node <= 0 or nodes <= 0:
        return False
    return sum(min(free // per_node, 2) for free in free_npus) >= 2 * nodes


def back_and_forth(moves: Iterable[tuple[frozenset, frozenset]]) -> int:
    """How many moves put a deployment back on NPUs an earlier move took it off (the bench's count;
    `moves` are (from NPUs, to NPUs) in order)."""
    left: set = set()
    count = 0
    for source, target in moves:
        if target & left:
            count += 1
        left |= set(source)
    return count
