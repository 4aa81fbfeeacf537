"""Failover's policy on a fake clock (panel/deployments/failover/policy.py): repeated faults hold an NPU out,
several failed NPUs drain a node, and a flapping link does not move a deployment back and forth."""

from panel.deployments.failover import policy
from panel.deployments.failover.policy import NpuView, Thresholds

HOUR = 3600.0
T = Thresholds(hold_after=3, hold_window_s=HOUR, drain_node_at=2, settle_s=600, link_confirm_s=5)


def test_an_npu_that_failed_three_times_within_the_window_is_held():
    assert not policy.held([0, 600], 1200, T)
    assert policy.held([0, 600, 1200], 1200, T)


def test_failures_older_than_the_window_no_longer_count():
    assert not policy.held([0, 600, 1200], 1200 + HOUR - 599, T)
    assert policy.recent([0, 600, 1200, 5000], 1200 + HOUR - 599, T) == [1200]


def test_a_node_with_two_failed_npus_is_drained_one_is_not():
    assert not policy.drain_node(1, T)
    assert policy.drain_node(2, T)


def test_a_chip_signal_moves_at_once_a_link_signal_after_it_stayed_down():
    assert policy.move_now("health_critical", failed_since=100, now=100, t=T)
    assert not policy.move_now("link_down", failed_since=100, now=104, t=T)
    assert policy.move_now("link_down", failed_since=100, now=105, t=T)


def test_an_npu_back_in_service_is_no_target_until_it_settled():
    assert policy.may_target(NpuView("ok", None), 0, T)
    assert not policy.may_target(NpuView("ok", changed_at=1000), 1599, T)
    assert policy.may_target(NpuView("ok", changed_at=1000), 1600, T)
    assert not policy.may_target(NpuView("suspect", None), 0, T)
    assert not policy.may_target(NpuView("failed", None), 0, T)
    assert not policy.may_target(NpuView("ok", None, held=True), 10**9, T)


def flapping_link_run(period_s: float, seconds: int):
    """A deployment on NPU A (node 1) with NPU B (node 2) free; A's link goes down and up every
    `period_s`. Each second the leader moves the deployment off a failed NPU whose signal says move now, to
    an NPU the policy lets it target. Returns the moves made as (from, to)."""
    state = {"A": NpuView("ok", None), "B": NpuView("ok", None)}
    failures = {"A": [], "B": []}
    on, failed_since, moves = "A", {}, []
    for now in range(seconds):
        down = (now // period_s) % 2 == 1
        new = "failed" if down else "ok"
        if state["A"].state != new:
            if down:
                failures["A"].append(now)
                failed_since["A"] = now
            state["A"] = NpuView(new, now, held=policy.held(failures["A"], now, T))
        if policy.leave_now(state[on], "link_down", failed_since.get(on), now, T):
            targets = [name for name, npu in state.items() if name != on and policy.may_target(npu, now, T)]
            if targets:
                moves.append((frozenset({on}), frozenset({targets[0]})))
                on = targets[0]
    return moves


def test_a_flapping_link_moves_the_deployment_once_and_never_back():
    moves = flapping_link_run(period_s=3, seconds=1800)
    # Each flap is shorter than the confirm time; the third within the window holds A, and only then does
    # the deployment leave it, once, for good.
    assert moves == [(frozenset({"A"}), frozenset({"B"}))]
    assert policy.back_and_forth(moves) == 0


def test_a_link_down_for_long_moves_it_and_the_npu_is_held_after_repeated_flaps():
    moves = flapping_link_run(period_s=60, seconds=1800)
    assert moves == [(frozenset({"A"}), frozenset({"B"}))]
    assert policy.held([60, 180, 300], 300, T)


def test_a_held_npu_is_left_even_while_its_signals_look_fine():
    assert policy.leave_now(NpuView("ok", 0, held=True), "health_critical", None, 0, T)
    assert not policy.leave_now(NpuView("ok", 0), "health_critical", None, 0, T)
    assert policy.leave_now(NpuView("failed", 0), "ecc_burst", None, 0, T)


def test_back_and_forth_counts_a_move_onto_npus_an_earlier_move_left():
    a, b, c = frozenset({"a"}), frozenset({"b"}), frozenset({"c"})
    assert policy.back_and_forth([(a, b), (b, c)]) == 0
    assert policy.back_and_forth([(a, b), (b, a)]) == 1


def test_a_node_offline_past_the_bound_is_lost_one_back_in_time_is_not():
    t = Thresholds(node_offline_s=15)
    # Heard at 100, offline after 15 s of silence (the sweep), lost 15 s after that.
    assert not policy.node_lost(False, 100, 10_000, 15, t)  # online: whatever its last word, nothing moves
    assert not policy.node_lost(True, 100, 129.9, 15, t)
    assert policy.node_lost(True, 100, 130, 15, t)
    assert policy.node_lost(True, None, 0, 15, t)  # never heard from, offline


def test_a_node_that_came_back_is_no_reason_to_move_anything_back():
    # The failover moves work off lost nodes only: a node online again is not lost, whatever it missed,
    # and the moved replicas' new nodes are online, so the next pass moves nothing.
    t = Thresholds(node_offline_s=15)
    assert policy.node_lost(True, 100, 200, 15, t)
    assert not policy.node_lost(False, 199, 200, 15, t)
    moves = [(frozenset({("a", 0)}), frozenset({("b", 1)}))]
    assert policy.back_and_forth(moves) == 0
    assert policy.back_and_forth([*moves, (frozenset({("b", 1)}), frozenset({("a", 0)}))]) == 1


def test_a_surge_of_a_multi_node_replica_needs_room_for_two_copies_on_different_nodes():
    # Two parts of 2 NPUs: the surge and the replacement each need two nodes.
    assert policy.surge_room([4, 4], per_node=2, nodes=2)
    assert policy.surge_room([2, 4, 2], per_node=2, nodes=2)
    # One node with room for four parts still holds one part of each copy only.
    assert not policy.surge_room([8, 2], per_node=2, nodes=2)
    assert not policy.surge_room([2, 2, 1], per_node=2, nodes=2)
    assert not policy.surge_room([], per_node=2, nodes=2)
