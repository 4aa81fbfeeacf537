"""The autoscaling policy (panel/deployments/autoscale/policy.py) on a fake clock: figures arrive every two
seconds per replica, as the reconcile tick's probes bring them; the policy sees only those and the time."""

from panel.deployments.autoscale.config import Autoscale, capacity_of
from panel.deployments.autoscale.policy import DOWN, HOLD, UP, decide
from panel.deployments.reasons import english

EVERY_S = 2.0


def config(target="waiting_per_replica", value=4.0, lo=1, hi=4, up=30.0, down=60.0) -> Autoscale:
    return Autoscale(min=lo, max=hi, target=target, value=value, up_after_s=up, down_after_s=down)


class Clock:
    """Probe answers per replica, oldest first; `run` adds `seconds` of them, each from `figures(t)`."""

    def __init__(self, replicas: int):
        self.now = 1_000_000.0
        self.series: dict[str, list] = {f"chat/{i}": [] for i in range(replicas)}

    def run(self, seconds: float, figures) -> None:
        end = self.now + seconds
        while self.now < end:
            self.now += EVERY_S
            for samples in self.series.values():
                samples.append((self.now, figures(self.now) if callable(figures) else dict(figures)))


def busy(waiting=9.5, running=8):
    return {"waiting": waiting, "running": running, "kv_cache_usage": 0.9, "window_ttft_p90": 2.5}


IDLE = {"waiting": 0, "running": 0, "kv_cache_usage": 0.0, "window_ttft_p90": None}


def test_it_scales_up_once_the_queue_stayed_above_target_for_the_whole_window():
    clock = Clock(2)
    clock.run(20, busy())
    assert decide(config(), clock.series, 2, clock.now, capacity=8).action == HOLD  # 20 s < 30 s
    clock.run(12, busy())
    decision = decide(config(), clock.series, 2, clock.now, capacity=8)
    # 35 requests in the engines: 3 replicas' 24 slots would not hold them, 4 would (at most double).
    assert (decision.action, decision.to) == (UP, 4)
    assert decision.figures == {"waiting_per_replica": 9.5, "target": 4.0, "for_s": 30, "from": 2, "to": 4}
    assert english(decision.reason) == "waiting 9.5/replica > 4.0 for 30 s: 2 → 4"


def test_a_burst_shorter_than_the_window_does_not_scale():
    clock = Clock(1)
    clock.run(40, IDLE)
    clock.run(10, busy())
    clock.run(22, lambda t: IDLE if t < clock.now + 4 else busy())  # quiet 4 s in the middle, then busy
    assert decide(config(), clock.series, 1, clock.now, capacity=8).action == HOLD


def test_flapping_figures_never_scale_either_way():
    clock = Clock(2)
    clock.run(120, lambda t: busy() if int(t / EVERY_S) % 3 else IDLE)
    decision = decide(config(), clock.series, 2, clock.now, capacity=8)
    assert decision.action == HOLD


def test_missing_figures_hold_a_replica_silent_for_a_while_or_one_without_the_figure():
    clock = Clock(2)
    clock.run(40, busy())
    del clock.series["chat/1"][3:9]  # its probes did not come back for 14 s
    decision = decide(config(), clock.series, 2, clock.now, capacity=8)
    assert decision.action == HOLD
    assert english(decision.reason) == "figures missing: holding"

    clock = Clock(1)
    clock.run(40, {"running": 8})  # an engine that exports no waiting figure
    assert decide(config(), clock.series, 1, clock.now, capacity=8).action == HOLD


def test_it_scales_down_when_the_load_fits_one_fewer_for_the_down_window_and_not_before():
    clock = Clock(3)
    clock.run(62, {"waiting": 0, "running": 3})  # 9 running over 3 replicas of 8: 2 hold them, 1 does not
    decision = decide(config(), clock.series, 3, clock.now, capacity=8)
    assert (decision.action, decision.to) == (DOWN, 2)
    assert (decision.figures["band"], decision.figures["load"]) == (2.0, 9.0)
    # Erlang C: 9 requests at random over 16 slots leave 0.016 waiting per replica on average.
    assert english(decision.reason) == "waiting on 2 replicas would be 0.016/replica < 2.0 for 60 s: 3 → 2"

    # 15 running would fit 2 replicas' 16 slots, but at 94 % of them requests queue: 5.5 per replica.
    clock = Clock(3)
    clock.run(62, {"waiting": 0, "running": 5})
    assert decide(config(), clock.series, 3, clock.now, capacity=8).action == HOLD

    # After a burst: the fewest that held the whole window, in one step, never below min.
    clock = Clock(5)
    quiet = {"waiting": 0, "running": 2, "kv_cache_usage": 0.1, "window_ttft_p90": 0.1}
    clock.run(62, quiet)  # 10 running: 2 engines of 8 hold them
    assert decide(config(hi=5), clock.series, 5, clock.now, capacity=8).to == 2
    assert decide(config(lo=3, hi=5), clock.series, 5, clock.now, capacity=8).to == 3
    kv = config("kv_usage", 0.8, hi=5)  # 0.1 on 5 is 0.25 on 2 (under 0.4), 0.5 on 1
    assert decide(kv, clock.series, 5, clock.now, capacity=8).to == 2
    ttft = config("ttft_p90_ms", 1000.0, hi=5)  # a TTFT on fewer engines is not known: one at a time
    assert decide(ttft, clock.series, 5, clock.now, capacity=8).to == 4

    clock = Clock(2)
    clock.run(62, {"waiting": 0, "running": 7})  # 14 running do not fit on one engine of 8
    decision = decide(config(), clock.series, 2, clock.now, capacity=8)
    assert decision.action == HOLD


def test_one_step_at_a_time_and_a_full_window_after_each_change():
    clock = Clock(2)
    clock.run(60, busy())
    changed = clock.now - 10
    decision = decide(config(), clock.series, 2, clock.now, last_change=changed, capacity=8)
    assert decision.action == HOLD
    assert english(decision.reason) == "cooling down: 10 s since the last change"
    clock.run(18, busy())
    assert decide(config(), clock.series, 2, clock.now, last_change=changed, capacity=8).action == HOLD
    clock.run(4, busy())
    decision = decide(config(), clock.series, 2, clock.now, last_change=changed, capacity=8)
    assert (decision.action, decision.to) == (UP, 4)


def test_min_and_max_bound_every_step():
    clock = Clock(4)
    clock.run(60, busy())
    decision = decide(config(hi=4), clock.series, 4, clock.now, capacity=8)
    assert decision.action == HOLD
    assert english(decision.reason) == "at max 4"

    clock = Clock(1)
    clock.run(120, IDLE)
    assert decide(config(lo=1), clock.series, 1, clock.now, capacity=8).action == HOLD
    decision = decide(config(lo=2), clock.series, 1, clock.now, capacity=8)
    assert (decision.action, decision.to) == (UP, 2)
    assert english(decision.reason) == "below min 2: 1 → 2"
    decision = decide(config(hi=3), Clock(5).series, 5, clock.now, capacity=8)
    assert (decision.action, decision.to) == (DOWN, 4)


def test_ttft_and_kv_targets_read_their_own_figures():
    clock = Clock(2)
    clock.run(32, busy())
    decision = decide(config("ttft_p90_ms", 1000.0), clock.series, 2, clock.now, capacity=8)
    assert (decision.action, decision.figures["ttft_p90_ms"]) == (UP, 2500.0)
    # 2.5 × the target on 2 asks for 5, at most double: 4.
    assert english(decision.reason) == "TTFT p90 2500.0 ms > 1000.0 ms for 30 s: 2 → 4"
    decision = decide(config("kv_usage", 0.8), clock.series, 2, clock.now, capacity=8)
    assert (decision.action, decision.figures["kv_usage"]) == (UP, 0.9)

    clock = Clock(2)
    clock.run(62, {"waiting": 0, "running": 1, "kv_cache_usage": 0.3, "window_ttft_p90": 0.1})
    decision = decide(config("kv_usage", 0.8), clock.series, 2, clock.now, capacity=8)
    assert decision.action == HOLD  # 0.3 on two is 0.6 on one: not under 0.4
    decision = decide(config("ttft_p90_ms", 1000.0), clock.series, 2, clock.now, capacity=8)
    assert (decision.action, decision.to) == (DOWN, 1)
    clock = Clock(2)
    clock.run(62, IDLE)  # idle engines time no first token: that is not a missing figure
    assert decide(config("ttft_p90_ms", 1000.0), clock.series, 2, clock.now, capacity=8).action == DOWN


def test_capacity_comes_from_the_engine_flags():
    assert capacity_of({"extra_flags": {"--max-num-seqs": 16}}) == 16
    assert capacity_of({"extra_flags": {}}) == 256


def test_a_steep_queue_takes_as_many_replicas_as_it_needs_at_most_double():
    clock = Clock(2)
    clock.run(32, busy(waiting=20, running=8))  # 56 in all; each replica holds 8 running + 4 waiting
    decision = decide(config(hi=8), clock.series, 2, clock.now, capacity=8)
    assert (decision.action, decision.to) == (UP, 4)  # 56 in the engines fill 7 replicas: double 2 is 4
    assert decide(config(hi=3), clock.series, 2, clock.now, capacity=8).to == 3  # never above max
    clock = Clock(4)
    clock.run(32, busy(waiting=6, running=8))  # 56 on 4: 7 replicas' 56 slots would be full, 8 hold it
    assert decide(config(hi=8), clock.series, 4, clock.now, capacity=8).to == 8
    # The lowest load of the window decides: a queue that just grew does not count at its peak. 20 in
    # the engines queue 0.5 a replica on 3 (at most the target, 1); the 96 at the end would ask for double.
    clock = Clock(2)
    clock.run(32, lambda t: busy(waiting=40 if t > clock.now + 28 else 2, running=8))
    assert decide(config(value=1.0, hi=8), clock.series, 2, clock.now, capacity=8).to == 3


def test_min_zero_sleeps_the_last_replica_only_after_a_whole_quiet_window():
    zero = config(lo=0, down=60.0)
    assert (zero.floor, zero.to_zero) == (1, True)
    clock = Clock(1)
    clock.run(40, IDLE)
    clock.run(4, {"waiting": 0, "running": 1})  # one request ran 40 s in
    clock.run(58, IDLE)
    decision = decide(zero, clock.series, 1, clock.now, capacity=8)
    assert decision.action == HOLD  # its request is inside the last 60 s
    clock.run(6, IDLE)
    decision = decide(zero, clock.series, 1, clock.now, capacity=8)
    assert (decision.action, decision.to) == (DOWN, 0)
    assert decision.figures == {"for_s": 60, "from": 1, "to": 0}
    assert english(decision.reason) == "no request running or waiting for 60 s: 1 → 0, asleep (min 0)"
    # Never below one row, and from two replicas down is one step to one, as with min 1.
    clock = Clock(2)
    clock.run(62, IDLE)
    assert decide(zero, clock.series, 2, clock.now, capacity=8).to == 1
    # A replica that reported nothing (asleep, left out by the decider): nothing to decide on.
    assert decide(zero, {}, 1, clock.now, capacity=8).action == HOLD


def test_a_queue_that_drains_at_its_own_pace_holds_one_that_does_not_scales():
    # A burst's backlog served by the engines there: 30 waiting fall to 10 in 30 s, gone in about 15 s more.
    clock = Clock(2)
    start = clock.now
    clock.run(32, lambda t: busy(waiting=15 - (t - start) / 3, running=8))
    decision = decide(config(), clock.series, 2, clock.now, capacity=8)
    assert decision.action == HOLD
    assert english(decision.reason) == "the queue drains: 28.7 → 8.7 waiting in 30 s, gone in about 13 s"
    # Falling too slowly to be gone within one more window: it still asks for more engines.
    clock = Clock(2)
    start = clock.now
    clock.run(32, lambda t: busy(waiting=15 - (t - start) / 30, running=8))
    assert decide(config(), clock.series, 2, clock.now, capacity=8).action == UP
    # Other targets are not a queue: a falling TTFT above its target still scales.
    clock = Clock(2)
    start = clock.now
    clock.run(32, lambda t: {**busy(), "window_ttft_p90": 4.0 - (t - start) / 10})
    assert decide(config("ttft_p90_ms", 500.0), clock.series, 2, clock.now, capacity=8).action == UP


def test_sleeping_rows_count_towards_min_and_max_but_an_up_is_in_serving_engines():
    # Two of four rows serve (the others sleep) and are busy: up in serving engines, to 4 (the two asleep
    # woken), not past max 4 in rows.
    clock = Clock(2)
    clock.run(32, busy())
    decision = decide(config(hi=4), clock.series, 2, clock.now, capacity=8, asleep=2)
    assert (decision.action, decision.current, decision.to) == (UP, 2, 4)
    # Below min only when rows are: one serving and one asleep is min 2.
    clock = Clock(1)
    clock.run(62, IDLE)
    assert decide(config(lo=2), clock.series, 1, clock.now, capacity=8, asleep=1).action == HOLD
    # No down while one sleeps: fewer engines serve than the rows already.
    clock = Clock(3)
    clock.run(62, IDLE)
    assert decide(config(), clock.series, 3, clock.now, capacity=8).action == DOWN
    assert decide(config(), clock.series, 3, clock.now, capacity=8, asleep=1).action == HOLD


def test_a_rising_queue_scales_up_though_one_sample_caught_it_at_the_line():
    # A burst a little above the engines' pace: the queue climbs 0 → 5 per replica over the 10 s window,
    # and one probe 4 s in caught it back at the target. It grows, it is not noise: up.
    clock = Clock(2)
    clock.run(20, IDLE)
    start = clock.now
    line = start + 4

    def climbing(t):
        return busy(waiting=1.0 if t == line else (t - start) / 2, running=8)

    clock.run(10, climbing)
    decision = decide(config(value=1.0, up=10.0), clock.series, 2, clock.now, capacity=8)
    assert (decision.action, decision.to) == (UP, 3)
    assert english(decision.reason) == "waiting rose to 5.0/replica > 1.0 over 10 s: 2 → 3"
    # The same dip in a queue that stays flat around the line holds (the flapping test's rule).
    clock = Clock(2)
    clock.run(20, lambda t: busy(waiting=1.0 if int(t / EVERY_S) % 3 == 0 else 1.5, running=8))
    assert decide(config(value=1.0, up=10.0), clock.series, 2, clock.now, capacity=8).action == HOLD


def test_reports_all_older_than_a_short_window_hold_not_crash():
    # Probes late under load: the newest report is 7 s old, inside the 10 s gap but before a 5 s window's
    # start. Nothing was seen in the window: a hold (this raised ValueError from min() and the step died).
    clock = Clock(2)
    clock.run(30, busy())
    decision = decide(config(value=1.0, up=5.0, down=30.0), clock.series, 2, clock.now + 7, capacity=8)
    assert decision.action == HOLD
    assert english(decision.reason) == "figures missing: holding"


def spread(clock: Clock, seconds: float, totals) -> None:
    """Probes of `seconds` whose requests in the engines number `totals(t)` in all, spread as the gateway's
    least outstanding routing spreads them (whole requests, the first replicas one more)."""
    end = clock.now + seconds
    while clock.now < end:
        clock.now += EVERY_S
        total, names = totals(clock.now), list(clock.series)
        for index, name in enumerate(names):
            share = total // len(names) + (1 if index < total % len(names) else 0)
            clock.series[name].append((clock.now, {"running": min(share, 2), "waiting": max(0, share - 2)}))


def test_a_burst_at_83_percent_of_the_fewer_replicas_slots_does_not_go_down():
    # bench/elastic's burst: 5-6 requests in the engines (5 a second of about 1 s), 2 sequences a replica,
    # target 1 waiting. They always fit 3 replicas' 6 slots, and the old projection (load / 3 - 2 = 0
    # waiting) went 4 → 3 mid-burst; arriving at random they queue 2.9 a replica there (Erlang C at
    # 5.5 / 6 slots), so the burst stays on 4. From 5, the same load goes to 4 (0.14 a replica), not 3.
    burst = config(value=1.0, lo=2, hi=5, up=5.0, down=30.0)
    clock = Clock(4)
    spread(clock, 32, lambda t: 5 + int(t / EVERY_S) % 2)
    assert decide(burst, clock.series, 4, clock.now, capacity=2).action == HOLD
    clock = Clock(5)
    spread(clock, 32, lambda t: 5 + int(t / EVERY_S) % 2)
    decision = decide(burst, clock.series, 5, clock.now, capacity=2)
    assert (decision.action, decision.to, decision.figures["load"]) == (DOWN, 4, 5.5)
    assert english(decision.reason) == "waiting on 4 replicas would be 0.138/replica < 0.5 for 30 s: 5 → 4"
    # After it, the quiet (one request in the engines about half the time) goes to min in one step; M/M/2
    # at one request in flight queues 1/3 (the textbook figure), under the band, on one replica of 2 slots.
    clock.run(32, lambda t: {"running": 0, "waiting": 0})
    spread(clock, 32, lambda t: int(t / EVERY_S) % 2)
    assert decide(burst, clock.series, 5, clock.now, capacity=2).to == 2
    clock = Clock(3)
    spread(clock, 32, lambda t: 1)
    decision = decide(config(value=1.0, lo=1, down=30.0), clock.series, 3, clock.now, capacity=2)
    assert (decision.to, decision.figures["waiting_per_replica"]) == (1, 0.333)


def test_no_down_while_the_load_rises_again_though_the_window_was_quiet_on_average():
    # Quiet for most of the down window, then its last seconds back at 7 in the engines (none waiting yet,
    # so no up): the window's mean (1.8) would fit 2 replicas, its last up window's (7) needs all 4.
    clock = Clock(4)
    start = clock.now
    spread(clock, 32, lambda t: 7 if t > start + 26 else 1)
    decision = decide(config(value=1.0, lo=2, up=5.0, down=30.0), clock.series, 4, clock.now, capacity=2)
    assert decision.action == HOLD
