"""When a deployment gets one replica more or one fewer: a pure function of the engines' figures over time.

Input: per replica, its probes' figures as they reached the panel (panel/deployments/metrics_history.py:
`waiting`, `running`, `kv_cache_usage`, `window_ttft_p90` in seconds), the deployment's `autoscale:`, the
current count, when it last changed, and the time now. Output: a Decision (up, down or hold) with the
figures it was taken on and its reason in parts (panel/deployments/reasons.py).

- Up: the figure (mean over the replicas) is above the target at every sample of the last `up_after_s`;
  with `waiting_per_replica` also when the queue rose through the window (its later half's mean at least
  `target` above its earlier half's) and stands above the target on average and at the newest sample. A
  burst only a little above the engines' pace keeps its queue near the target for its first seconds, and
  whether one probe then caught a dip decided when the first up fired: 7 s or 14 s into bench/elastic's
  burst on the same trace, and the later one sized to a grown backlog (2 → 4, docs/serving-plane.md §3).
- Down, `waiting_per_replica`, with queueing in mind: the requests in the engines (running and waiting)
  averaged over the last `down_after_s` (or over its last `up_after_s` when that is more, so a load rising
  again is not averaged away) are by Little's law the offered load (arrivals × time in an engine), and
  M/M/c (Erlang C, c = replicas × `capacity`, the engine's --max-num-seqs) gives the queue such arrivals
  meet at random. Down when one replica fewer would keep it under half the target, to the fewest that
  would (as Kubernetes' HPA goes to its desired count: after a burst each extra replica would otherwise
  hold its NPU a whole window longer). Why not a fluid: `load / fewer - capacity` at every sample called
  5-6 requests on 3 replicas' 6 slots "0 waiting" and bench/elastic went 4 → 3 mid-burst, where arrivals at
  random queue 1-3 a replica. Why the mean and not every sample's peak: the peak of n probes grows with n
  (how many came back on a loaded machine decided the step), the mean does not; the window is the
  stabilization. bench/elastic_replay.py replays the bench's trace through this (docs/serving-plane.md §3).
- Down with the other targets: at every sample of the last `down_after_s` the figure on one replica fewer
  (KV usage × count / fewer; a TTFT as it is) stays under half the target and the requests fit the fewer
  engines' slots; then to the fewest that the same holds for. A TTFT cannot be projected onto fewer
  engines: that target steps by one.
- The window must be covered: every replica reported since before it began, no two reports further apart
  than `gap_s`, the latest one fresh. Missing or stale figures hold: it never acts on what it cannot see.
- Up by as many replicas as the figure asks for, at most doubling (Kubernetes' HPA doubles too: a
  2-minute burst is half over after three single steps of a cold start and a window each): with
  `waiting_per_replica`, the fewest replicas on which the window's lowest load, taken as offered, would
  queue at most `target` a replica (the down's model, so the next down window does not undo it); a queue
  of `target` is no capacity: the fluid count (load / (capacity + target)) put bench/elastic's burst of
  6-7 requests a second on 3 replicas' 6 slots. With the others, the count times figure / target.
- A queue that drains on its own holds (`waiting_per_replica`): when the waiting requests fell over the
  window fast enough to be gone within one more window at that pace, the engines there are catching up with
  a backlog (a burst's first seconds, before the last step's replicas served), and more replicas would come
  when it is gone and stay a whole down window for nothing.
- One step at a time, and none within a window after the last change (cooldown): the next step is decided
  on figures taken with the new count.
- Engines asleep (`asleep`: rows whose engine sleeps, put there by the idle step, a person or min 0) count
  towards min and max, as rows, but not in `current` (the engines serving): an up is in serving engines and
  the decider wakes a sleeper for it before it places a new one (a wake takes seconds, a cold start minutes).
  No down while one sleeps: the deployment serves on fewer engines than its rows already.
- Below `min` (at least one replica) or above `max` (the range was just changed) goes there at once, one
  step per tick.
- `min: 0` (config.py): from one replica, down is to zero, the engine asleep, when no request ran or waited
  at any sample of the last `down_after_s` (the decider checks the gateway's last request too).
- A role of a disaggregated deployment is decided the same way on its own engines' series, count and
  block (`role`): its reason starts with the role ("decode: waiting 5.0/replica > 4 for 30 s: 1 → 2").
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from django.utils.translation import gettext_noop

from panel.deployments import reasons
from panel.deployments.autoscale.config import KV_USAGE, TTFT_P90_MS, WAITING_PER_REPLICA, Autoscale

UP = "up"
DOWN = "down"
HOLD = "hold"
DOWN_BAND = 0.5  # one replica fewer must keep the figure under half the target: no flapping at the line

Sample = tuple[float, Mapping[str, Any]]  # (epoch seconds, figures)

# How each target is named in figures and reasons.
FIGURE_NAME = {
    TTFT_P90_MS: "ttft_p90_ms",
    WAITING_PER_REPLICA: "waiting_per_replica",
    KV_USAGE: "kv_usage",
}
UP_REASON = {
    TTFT_P90_MS: gettext_noop("TTFT p90 {value} ms > {target} ms for {for_s} s: {from} → {to}"),
    WAITING_PER_REPLICA: gettext_noop("waiting {value}/replica > {target} for {for_s} s: {from} → {to}"),
    KV_USAGE: gettext_noop("KV cache {value} > {target} for {for_s} s: {from} → {to}"),
}
DOWN_REASON = {
    TTFT_P90_MS: gettext_noop(
        "TTFT p90 {value} ms < {band} ms and the load fits {to} replicas for {for_s} s: {from} → {to}"
    ),
    WAITING_PER_REPLICA: gettext_noop(
        "waiting on {to} replicas would be {value}/replica < {band} for {for_s} s: {from} → {to}"
    ),
    KV_USAGE: gettext_noop(
        "KV cache on {to} replicas would be {value} < {band} for {for_s} s: {from} → {to}"
    ),
}
RISING_REASON = gettext_noop("waiting rose to {value}/replica > {target} over {for_s} s: {from} → {to}")
TO_ZERO_REASON = gettext_noop("no request running or waiting for {for_s} s: {from} → 0, asleep (min 0)")
ROLE_REASON = gettext_noop("{role}:")  # before the reason of a role's decision
DRAINING_REASON = gettext_noop(
    "the queue drains: {first} → {last} waiting in {for_s} s, gone in about {in_s} s"
)


@dataclass(frozen=True)
class Decision:
    action: str  # up | down | hold
    current: int
    to: int
    figures: dict[str, float | int | None] = field(default_factory=dict)
    reason: list[dict] = field(default_factory=list)


@dataclass(frozen=True)
class Moment:
    """The replicas' figures at one time: each replica's latest report then."""

    time: float
    reports: tuple[Mapping[str, Any], ...]


def decide(
    config: Autoscale,
    series: Mapping[str, Sequence[Sample]],
    current: int,
    now: float,
    *,
    last_change: float | None = None,
    capacity: int = 256,
    gap_s: float = 10.0,
    asleep: int = 0,
    role: str = "",
) -> Decision:
    """Up, down or hold for a deployment (or its `role`) with `current` replicas serving (their `series`,
    oldest first) and `asleep` more rows whose engines sleep."""
    decision = _decide(config, series, current, now, last_change, capacity, gap_s, asleep)
    if not role:
        return decision
    return replace(decision, reason=[reasons.part(ROLE_REASON, role=role), *decision.reason])


def _decide(config, series, current, now, last_change, capacity, gap_s, asleep) -> Decision:
    rows = current + asleep
    if rows < config.floor:
        return _bounds(current, current + 1, gettext_noop("below min {min}: {from} → {to}"), config)
    if rows > config.max and current > 0:
        return _bounds(current, current - 1, gettext_noop("above max {max}: {from} → {to}"), config)
    if last_change is not None:
        since = now - last_change
        if since < min(config.up_after_s, config.down_after_s):
            why = gettext_noop("cooling down: {for_s} s since the last change")
            return _hold(current, why, for_s=round(since))
    up = _try_up(config, series, current, now, last_change, capacity, gap_s)
    if up.action != HOLD or current <= config.min or asleep:
        return up
    if current == 1:  # min 0: the last replica is not removed, it sleeps
        down = _try_zero(config, series, current, now, last_change, gap_s)
    else:
        down = _try_down(config, series, current, now, last_change, capacity, gap_s)
    return down if down.action != HOLD else up


def _try_up(config, series, current, now, last_change, capacity, gap_s) -> Decision:
    window = config.up_after_s
    if current >= config.max:
        return _hold(current, gettext_noop("at max {max}"), max=config.max)
    moments = _moments(series, current, now, window, last_change, gap_s)
    if isinstance(moments, Decision):
        return moments
    values = [_figure(config.target, moment) for moment in moments]
    if any(value is None for value in values):
        return _hold(current, gettext_noop("figures missing: holding"))
    lowest = min(v for v in values if v is not None)
    if lowest <= config.value and not _rising(config, values):
        return _hold(current, gettext_noop("within target"), value=_round(lowest))
    if config.target == WAITING_PER_REPLICA and (draining := _draining(moments, window)) is not None:
        return draining
    to = _up_to(config, moments, current, lowest, capacity)
    if lowest <= config.value:  # up on a rising queue: its newest figure, and the reason says it rose
        return _step(config, UP, current, to, values[-1], window, RISING_REASON)
    return _step(config, UP, current, to, lowest, window, UP_REASON[config.target])


def _rising(config: Autoscale, values: list) -> bool:
    """A queue that rose through the window by at least the target per replica and stands above it (on
    average and now): growing, not flapping around the line, so one sample at the line does not hold it."""
    if config.target != WAITING_PER_REPLICA or len(values) < 3:
        return False
    half = len(values) // 2
    earlier, later = values[:half], values[half:]
    rise = sum(later) / len(later) - sum(earlier) / len(earlier)
    return rise >= config.value and values[-1] > config.value and sum(values) / len(values) > config.value


def _draining(moments: list[Moment], window: float) -> Decision | None:
    """A hold when the waiting requests fell over the window at a pace that empties the queue within one more
    window: the backlog of a burst's start being served by the engines there (its own pace, not a guess)."""
    first, last = _waiting(moments[0]), _waiting(moments[-1])
    elapsed = moments[-1].time - moments[0].time
    if elapsed <= 0 or last >= first:
        return None
    gone_in = last * elapsed / (first - last)
    if gone_in > window:
        return None
    current = len(moments[-1].reports)
    return _hold(
        current, DRAINING_REASON, first=_round(first), last=_round(last), for_s=round(elapsed),
        in_s=round(gone_in),
    )  # fmt: skip


def _up_to(config, moments: list[Moment], current: int, lowest: float, capacity: int) -> int:
    """The count the figure asks for: at least one more, at most double, never above max (`_try_up` holds
    at max, so there is room for one more)."""
    most = min(config.max, 2 * current)
    if config.target == WAITING_PER_REPLICA:
        load = min(_load(moment) for moment in moments)
        queues = _queues(load, capacity, range(current + 1, most + 1))
        return min((count for count, queue in queues.items() if queue <= config.value), default=most)
    wanted = math.ceil(current * lowest / config.value)
    return min(most, max(current + 1, wanted))


def _try_zero(config, series, current, now, last_change, gap_s) -> Decision:
    """min 0, one replica: to zero (asleep) when nothing ran or waited at any sample of the down window."""
    window = config.down_after_s
    moments = _moments(series, current, now, window, last_change, gap_s)
    if isinstance(moments, Decision):
        return moments
    busiest = max(_load(moment) for moment in moments)
    if busiest > 0:
        return _hold(current, gettext_noop("within target"), value=_round(busiest))
    figures: dict[str, float | int | None] = {"for_s": round(window), "from": current, "to": 0}
    return Decision(DOWN, current, 0, figures, [reasons.part(TO_ZERO_REASON, **figures)])


def _try_down(config, series, current, now, last_change, capacity, gap_s) -> Decision:
    window = config.down_after_s
    moments = _moments(series, current, now, window, last_change, gap_s)
    if isinstance(moments, Decision):
        return moments
    if config.target == WAITING_PER_REPLICA:
        return _down_on_queue(config, moments, current, capacity, window)
    fewer = current - 1
    band = config.value * DOWN_BAND
    projected = [_projected(config.target, moment, current, fewer) for moment in moments]
    if any(value is None for value in projected):
        return _hold(current, gettext_noop("figures missing: holding"))
    highest = max(v for v in projected if v is not None)
    if highest >= band:
        return _hold(current, gettext_noop("within target"), value=_round(highest))
    if any(_load(moment) > fewer * capacity for moment in moments):
        return _hold(current, gettext_noop("the load would not fit {to} replicas"), to=fewer)
    to, highest = _fewest(config, moments, current, fewer, highest, capacity, band)
    return _down(config, current, to, highest, window, band)


def _down_on_queue(config, moments, current, capacity, window) -> Decision:
    """`waiting_per_replica`: down to the fewest replicas on which the window's offered load would queue
    under half the target (Erlang C), when one fewer would."""
    if any(_number(report.get("running")) is None for moment in moments for report in moment.reports):
        return _hold(current, gettext_noop("figures missing: holding"))
    offered = _offered(moments, config.up_after_s)
    band = config.value * DOWN_BAND
    fewer = current - 1
    queues = _queues(offered, capacity, range(config.floor, current))
    if math.isinf(queues[fewer]):
        return _hold(current, gettext_noop("the load would not fit {to} replicas"), to=fewer)
    if queues[fewer] >= band:
        return _hold(current, gettext_noop("within target"), value=_round(queues[fewer]))
    to = min(count for count, queue in queues.items() if queue < band)
    decision = _down(config, current, to, queues[to], window, band)
    decision.figures["load"] = _round(offered)
    return decision


def _offered(moments: list[Moment], recent_s: float) -> float:
    """The requests in the engines (running and waiting) on average over the window, or over its last
    `recent_s` when more: by Little's law arrivals × time in the engine, the offered load while few wait
    (more than it when many do). The whole window's mean is the steady estimate, the one a probe's luck
    moves least; the recent one keeps a down from being taken while the load rises again."""
    loads = [_load(moment) for moment in moments]
    since = moments[-1].time - recent_s
    recent = [load for moment, load in zip(moments, loads, strict=True) if moment.time >= since]
    return max(sum(loads) / len(loads), sum(recent) / len(recent))


def _queues(offered: float, capacity: int, counts: range) -> dict[int, float]:
    """For each count: the requests waiting per replica, on average, when `offered` requests are in the
    engines on average and arrive at random over that many replicas of `capacity` slots each: M/M/c's mean
    queue with c = count × capacity (Erlang C); infinite once the load fills the slots."""
    found: dict[int, float] = {}
    blocking = 1.0  # Erlang B by its recurrence over the servers: stable for thousands of them
    for servers in range(1, counts[-1] * capacity + 1):
        blocking = offered * blocking / (servers + offered * blocking)
        count, rest = divmod(servers, capacity)
        if rest or count not in counts:
            continue
        if offered >= servers:
            found[count] = math.inf
        elif offered <= 0:
            found[count] = 0.0
        else:
            waits = servers * blocking / (servers - offered * (1 - blocking))  # Erlang C: one has to wait
            found[count] = waits * offered / (servers - offered) / count
    return found


def _down(config, current, to, value, window, band) -> Decision:
    decision = _step(config, DOWN, current, to, value, window, DOWN_REASON[config.target])
    decision.figures["band"] = _round(band)
    decision.reason[0]["params"]["band"] = _round(band)
    return decision


def _fewest(config, moments, current, fewer, highest, capacity, band) -> tuple[int, float]:
    """The fewest replicas (not below the floor) that held the whole window under the band with the load
    fitting, and the figure on them (`kv_usage`): a burst's replicas go in one step, not one window each. A
    TTFT on fewer engines cannot be projected from the figure, so TTFT goes down one at a time."""
    if config.target == TTFT_P90_MS:
        return fewer, highest
    for count in range(config.floor, fewer):
        on = [_projected(config.target, moment, current, count) for moment in moments]
        fits = all(_load(moment) <= count * capacity for moment in moments)
        if fits and all(value is not None and value < band for value in on):
            return count, max(value for value in on if value is not None)
    return fewer, highest


def _moments(series, current, now, window, last_change, gap_s) -> list[Moment] | Decision:
    """The replicas' figures at every report of the window; a hold when a replica's reports do not cover
    it (a new replica, a probe that stopped answering) or the window reaches back before the last change."""
    start = now - window
    if last_change is not None and last_change > start:
        return _hold(current, gettext_noop("waiting for {for_s} s of figures since the last change"),
                     for_s=round(window))  # fmt: skip
    if not series:
        return _hold(current, gettext_noop("no replica serving"))
    kept: list[list[Sample]] = []
    for samples in series.values():
        ordered = sorted(samples, key=lambda sample: sample[0])
        inside = [s for s in ordered if s[0] >= start]
        before = [s for s in ordered if s[0] < start]
        if before:
            inside = [before[-1], *inside]
        if not _covers(inside, start, now, gap_s):
            return _hold(current, gettext_noop("figures missing: holding"))
        kept.append(inside)
    times = sorted({t for samples in kept for t, _figures in samples if t >= start})
    if not times:  # every report older than the window (probes late, a window shorter than the gap)
        return _hold(current, gettext_noop("figures missing: holding"))
    return [Moment(t, tuple(_latest(samples, t) for samples in kept)) for t in times]


def _covers(samples: list[Sample], start: float, now: float, gap_s: float) -> bool:
    """Whether the replica was watched the whole window: a report from before it began (or at its start),
    none of the reports further apart than `gap_s`, the latest one fresh."""
    if not samples or samples[0][0] > start or now - samples[-1][0] > gap_s:
        return False
    return all(later[0] - earlier[0] <= gap_s for earlier, later in zip(samples, samples[1:], strict=False))


def _latest(samples: list[Sample], time: float) -> Mapping[str, Any]:
    found = samples[0][1]
    for when, figures in samples:
        if when > time:
            break
        found = figures
    return found


def _figure(target: str, moment: Moment) -> float | None:
    """The target's figure at a moment, the mean over the replicas; None when one replica lacks it."""
    values = [_one(target, report) for report in moment.reports]
    if any(value is None for value in values):
        return None
    return sum(v for v in values if v is not None) / len(values)


def _one(target: str, report: Mapping[str, Any]) -> float | None:
    if target == WAITING_PER_REPLICA:
        return _number(report.get("waiting"))
    if target == KV_USAGE:
        return _number(report.get("kv_cache_usage"))
    ttft = _number(report.get("window_ttft_p90"))
    if ttft is None and _number(report.get("running")) == 0 and _number(report.get("waiting")) == 0:
        return 0.0  # idle: no request started in the window, so no first token to time
    return None if ttft is None else ttft * 1000.0


def _projected(target: str, moment: Moment, current: int, fewer: int) -> float | None:
    """The figure on `fewer` replicas (`kv_usage`, `ttft_p90_ms`; a queue is projected by `_queues`): the
    same KV blocks spread over fewer engines; a TTFT as it is."""
    value = _figure(target, moment)
    if value is None:
        return None
    return value * current / fewer if target == KV_USAGE else value


def _load(moment: Moment) -> float:
    """Requests running and waiting on all replicas."""
    return sum(
        (_number(report.get("running")) or 0.0) + (_number(report.get("waiting")) or 0.0)
        for report in moment.reports
    )


def _waiting(moment: Moment) -> float:
    """Requests waiting on all replicas."""
    return sum(_number(report.get("waiting")) or 0.0 for report in moment.reports)


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def _round(value: float) -> float:
    return round(value, 3 if value < 1 else 1)


def _step(config, action, current, to, value, window, template) -> Decision:
    figures: dict[str, float | int | None] = {
        FIGURE_NAME[config.target]: _round(value),
        "target": config.value,
        "for_s": round(window),
        "from": current,
        "to": to,
    }
    params = {**figures, "value": figures.pop(FIGURE_NAME[config.target])}
    figures[FIGURE_NAME[config.target]] = params["value"]
    return Decision(action, current, to, figures, [reasons.part(template, **params)])


def _bounds(current: int, to: int, template: str, config: Autoscale) -> Decision:
    action = UP if to > current else DOWN
    params = {"min": config.min, "max": config.max, "from": current, "to": to}
    figures: dict[str, float | int | None] = {"min": config.min, "max": config.max, "from": current, "to": to}
    return Decision(action, current, to, figures, [reasons.part(template, **params)])


def _hold(current: int, template: str, **params: Any) -> Decision:
    return Decision(HOLD, current, current, {"from": current, **params}, [reasons.part(template, **params)])
