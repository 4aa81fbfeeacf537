"""bench/elastic.py's trace on a fake clock through the real autoscaling policy: a model, not the panel.

    .venv/bin/python bench/elastic_replay.py [--scales 1.0,0.35] [--seeds 20] [--service-s 1.0,1.05,1.1]
        [--policy FILE | foresight] [--label NAME] [--phases node|replica] [--probe-s 2]

What is real: `policy.decide` (panel/deployments/autoscale/policy.py, or the copy `--policy` names, e.g. an
older version from `git show <commit>:panel/deployments/autoscale/policy.py > /tmp/policy_old.py`), called
as the decider calls it (autoscale/decider.py: every reconcile tick, no step while a replica starts or
stops, the last change's time, the engines' --max-num-seqs as capacity, a 10 s gap), and the bench's own
arrivals (bench.elastic.trace: Poisson, quiet, 10x burst, quiet; the trace seed is 36 + the replay's seed).

What is modelled: each engine runs `capacity` requests at once and queues the rest in arrival order (the
sim engine's scheduler); the gateway sends each request to the engine with the fewest outstanding (running
and queued on it; ties at random) and never to one starting or draining; a request takes --service-s
(±5 %), its first token comes after 1/20 of that (20 tokens a request, as the bench); the probes every
--probe-s bring running and waiting per engine, all engines of the node at one time (one agent message per
node, as rollouts/reconcile.py sends them) or each at its own phase (--phases replica); an up places new
engines that serve after a cold start of 1-3 s; a down drains the newest engines (they serve what they
hold, then stop one tick later). NPU-seconds count every row (starting, serving, draining) until the last
request ends, as the bench's watcher does. SLO: first token within --slo-ttft-s.

`--policy foresight` is no policy but a bound for all: a rule that knows when the burst starts and ends
(--foresight-replicas from its start + --foresight-after-s until a down window after its end, min
otherwise): what the trace costs when only the windows and the cold starts stand in the way.

One JSON line per (rule, scale, service time): over the seeds, the autoscaled run's SLO attainment and
NPU-seconds against fixed max (mean, worst), how many seeds met both targets (SLO >= 0.98 x fixed max's,
NPU-seconds <= 0.6 x), the requests that missed the SLO per seed by when they came (the burst's first 30 s,
the rest of it, the quiet parts), and seed 0's figures and scale steps ([seconds from the burst's start,
kind, from, to]): seed 0 replays the bench's own arrivals (its --seed 36).
"""

from __future__ import annotations

import argparse
import heapq
import importlib.util
import itertools
import json
import random
import statistics
import sys
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from django.conf import settings  # noqa: E402

settings.configure(USE_I18N=False)  # the policy's reasons are gettext_noop templates: no catalog needed

from bench.elastic import TRACE_S, trace  # noqa: E402
from panel.deployments.autoscale.config import Autoscale  # noqa: E402
from panel.deployments.autoscale.policy import Decision  # noqa: E402

TOKENS = 20
GAP_S = 10.0  # decider.gap_s() at the default 2 s tick
TICK_S = 2.0  # PANEL_DEPLOY_RECONCILE_S
SLO_SHARE, NPU_SHARE = 0.98, 0.6  # issue 36's targets against fixed max


@dataclass
class Engine:
    slots: int
    row_at: float  # its row exists from then (NPU-seconds count)
    ready_at: float  # it serves from then (after a cold start)
    running: int = 0
    queue: deque = field(default_factory=deque)  # arrival times of the requests waiting on it
    draining: bool = False
    gone_at: float | None = None  # its row removed
    samples: list = field(default_factory=list)  # (time, figures), as metrics_history keeps them
    ttfts: list = field(default_factory=list)  # first-token times since its last probe

    def outstanding(self) -> int:
        return self.running + len(self.queue)

    def serves(self, now: float) -> bool:
        return self.gone_at is None and not self.draining and self.ready_at <= now


class Replay:
    """One phase of the bench: `count` replicas fixed, or from `count` as `policy` decides with `config`."""

    def __init__(self, arrivals, burst_at, count, service_s, seed, args, policy=None, config=None):
        self.arrivals, self.burst_at, self.service_s, self.args = arrivals, burst_at, service_s, args
        self.capacity = args.capacity
        self.rng = random.Random(seed)
        self.policy, self.config = policy, config
        self.events: list = []  # (time, order, kind, payload)
        self.order = itertools.count()
        start = -args.lead_s  # a few probes before the trace: the bench waits 3 s
        self.engines = [Engine(self.capacity, row_at=start, ready_at=start) for _ in range(count)]
        self.wanted, self.last_change = count, None
        self.met = self.done = 0
        self.missed: list[float] = []  # arrival times of the requests that missed the SLO
        self.steps: list[list] = []

    def at(self, when: float, kind: str, payload=None) -> None:
        heapq.heappush(self.events, (when, next(self.order), kind, payload))

    def run(self) -> dict:
        start = -self.args.lead_s
        for offset in self.arrivals:
            self.at(offset, "arrive")
        if self.args.phases == "node":
            self.at(start + self.rng.uniform(0, self.args.probe_s), "probe")
        else:
            for engine in self.engines:
                self.at(start + self.rng.uniform(0, self.args.probe_s), "probe", engine)
        if self.policy is not None:
            self.at(start + self.rng.uniform(0, TICK_S), "tick")
        now = start
        while self.events and self.done < len(self.arrivals):
            now, _order, kind, payload = heapq.heappop(self.events)
            getattr(self, f"on_{kind}")(now, payload)
        held = sum(
            min(e.gone_at if e.gone_at is not None else now, now) - max(0.0, e.row_at) for e in self.engines
        )
        return {
            "slo": self.met / len(self.arrivals),
            "npu_seconds": held,
            "steps": self.steps,
            "missed": [round(arrived - self.burst_at, 1) for arrived in self.missed],
        }

    # Requests: routed least outstanding, at most `slots` running on an engine, the rest queued on it.
    def on_arrive(self, now, _payload) -> None:
        pool = [e for e in self.engines if e.serves(now)]
        least = min(e.outstanding() for e in pool)
        engine = self.rng.choice([e for e in pool if e.outstanding() == least])
        engine.queue.append(now)
        self._admit(engine, now)

    def _admit(self, engine: Engine, now: float) -> None:
        while engine.queue and engine.running < engine.slots:
            arrived = engine.queue.popleft()
            engine.running += 1
            took = self.service_s * self.rng.uniform(0.95, 1.05)
            ttft = now - arrived + took / TOKENS + self.args.overhead_s
            engine.ttfts.append(ttft)
            if ttft <= self.args.slo_ttft_s:
                self.met += 1
            else:
                self.missed.append(arrived)
            self.at(now + took, "finish", engine)

    def on_finish(self, now, engine: Engine) -> None:
        engine.running -= 1
        self.done += 1
        self._admit(engine, now)
        if engine.draining and engine.outstanding() == 0:
            self._stop(engine, now)

    def _stop(self, engine: Engine, now: float) -> None:
        """A drained engine's stop goes out on the next tick and takes --stop-s."""
        self.at(now + self.rng.uniform(0, TICK_S) + self.args.stop_s, "gone", engine)

    def on_gone(self, now, engine: Engine) -> None:
        engine.gone_at = now

    # Probes: running and waiting per engine serving, and the p90 of the first tokens since its last one.
    def on_probe(self, now, engine: Engine | None) -> None:
        if engine is None:  # one agent message for the node: every engine at one time
            self.at(now + self.args.probe_s, "probe")
            for each in self.engines:
                self._report(each, now)
            return
        if engine.gone_at is None and not engine.draining:
            self.at(now + self.args.probe_s, "probe", engine)
            self._report(engine, now)

    def _report(self, engine: Engine, now: float) -> None:
        if not engine.serves(now):
            return
        ttfts = sorted(engine.ttfts)
        engine.ttfts = []
        figures = {
            "running": engine.running,
            "waiting": len(engine.queue),
            "kv_cache_usage": engine.running / engine.slots,
            "window_ttft_p90": ttfts[int(0.9 * (len(ttfts) - 1))] if ttfts else None,
        }
        engine.samples.append((now, figures))

    # The decider's step (autoscale/decider.py): nothing while a change is under way, else the policy's.
    def on_tick(self, now, _payload) -> None:
        self.at(now + TICK_S, "tick")
        rows = [e for e in self.engines if e.gone_at is None]
        if len(rows) != self.wanted or any(e.draining or e.ready_at > now for e in rows):
            return
        window = max(self.config.up_after_s, self.config.down_after_s) + GAP_S
        series = {f"r{i}": [s for s in e.samples if now - window <= s[0] <= now] for i, e in enumerate(rows)}
        recent = (
            self.last_change if self.last_change is not None and now - self.last_change <= window else None
        )
        decision = self.policy.decide(
            self.config, series, self.wanted, now, last_change=recent, capacity=self.capacity, gap_s=GAP_S
        )
        if decision.action == "hold":
            return
        self.steps.append(
            [round(now - self.burst_at, 1), f"scale_{decision.action}", decision.current, decision.to]
        )
        self.wanted, self.last_change = decision.to, now
        for _ in range(decision.to - len(rows)):
            engine = Engine(
                self.capacity, row_at=now, ready_at=now + self.rng.uniform(*self.args.cold_start_s)
            )
            self.engines.append(engine)
            if self.args.phases == "replica":
                self.at(engine.ready_at + self.rng.uniform(0, self.args.probe_s), "probe", engine)
        for engine in rows[decision.to :]:  # a down deletes the highest replicas
            engine.draining = True
            if engine.outstanding() == 0:
                self._stop(engine, now)


class Foresight:
    """A rule that knows the trace, as a bound for any policy (not one): `replicas` from the burst's start +
    `after_s` (the earliest a real up can come: its window, a probe's lag) until a down window after its
    end, min otherwise."""

    def __init__(self, start: float, end: float, replicas: int, after_s: float):
        self.start, self.end, self.replicas = start + after_s, end, replicas

    def decide(self, config, _series, current, now, **_given) -> Decision:
        wanted = self.replicas if self.start <= now < self.end + config.down_after_s else config.min
        action = "up" if wanted > current else "down" if wanted < current else "hold"
        return Decision(action, current, wanted)


def load_policy(path: str | None):
    """The repo's policy module, or the one in the file `path` (an older version, a candidate)."""
    if not path:
        from panel.deployments.autoscale import policy

        return policy
    spec = importlib.util.spec_from_file_location("policy_under_replay", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def replay_scale(args, scale: float, service_s: float) -> dict:
    # bench/elastic.py's autoscale block
    config = Autoscale(
        min=args.min, max=args.max, target="waiting_per_replica", value=args.target_waiting,
        up_after_s=args.up_after_s, down_after_s=args.down_after_s,
    )  # fmt: skip
    burst_at, burst_s = TRACE_S[0][0] * scale, TRACE_S[1][0] * scale
    if args.policy == "foresight":
        policy = Foresight(burst_at, burst_at + burst_s, args.foresight_replicas, args.foresight_after_s)
    else:
        policy = load_policy(args.policy)
    slo_ratios, npu_ratios, fixed_max_slo, first_steps, met_both = [], [], [], None, 0
    missed = {"burst_first_30s": 0, "burst_rest": 0, "quiet": 0}
    for seed in range(args.seeds):
        arrivals = trace(scale, args.quiet_rps, 36 + seed)
        fixed = Replay(arrivals, burst_at, args.max, service_s, seed, args).run()
        auto = Replay(arrivals, burst_at, args.min, service_s, seed, args, policy, config).run()
        slo = auto["slo"] / fixed["slo"]
        npu = auto["npu_seconds"] / fixed["npu_seconds"]
        slo_ratios.append(slo)
        npu_ratios.append(npu)
        fixed_max_slo.append(fixed["slo"])
        met_both += slo >= SLO_SHARE and npu <= NPU_SHARE
        first_steps = first_steps or auto["steps"]
        for at in auto["missed"]:
            part = "quiet" if at < 0 or at >= burst_s else "burst_first_30s" if at < 30 else "burst_rest"
            missed[part] += 1
    return {
        "rule": args.label,
        "scale": scale,
        "service_s": service_s,
        "probe_phases": args.phases,
        "seeds": args.seeds,
        "fixed_max_slo": round(statistics.mean(fixed_max_slo), 4),
        "slo_vs_fixed_max": {
            "mean": round(statistics.mean(slo_ratios), 3),
            "worst": round(min(slo_ratios), 3),
        },
        "npu_seconds_vs_fixed_max": {
            "mean": round(statistics.mean(npu_ratios), 3),
            "worst": round(max(npu_ratios), 3),
        },
        "met_both": f"{met_both}/{args.seeds}",
        "missed_per_seed": {part: round(n / args.seeds, 1) for part, n in missed.items()},
        "seed0": {
            "slo_vs_fixed_max": round(slo_ratios[0], 3),
            "npu_seconds_vs_fixed_max": round(npu_ratios[0], 3),
        },
        "steps_seed0": first_steps,
    }


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--scales", default="1.0,0.35", help="trace time scales (bench/elastic.py --scale)")
    parser.add_argument("--service-s", default="1.0,1.05,1.1", help="seconds a request runs (20 tokens)")
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument(
        "--policy", help="a policy.py to replay instead of the repo's, or `foresight` (a bound)"
    )
    parser.add_argument("--foresight-replicas", type=int, default=4, help="foresight: replicas in the burst")
    parser.add_argument(
        "--foresight-after-s", type=float, default=0.0, help="foresight: from its start + this"
    )
    parser.add_argument("--label", default="current", help="the rule's name in the output")
    parser.add_argument("--min", type=int, default=2)
    parser.add_argument("--up-after-s", type=float, default=5.0, help="the autoscale block's up window")
    parser.add_argument("--down-after-s", type=float, default=30.0, help="the autoscale block's down window")
    parser.add_argument("--max", type=int, default=5)
    parser.add_argument("--quiet-rps", type=float, default=0.5)
    parser.add_argument("--capacity", type=int, default=2, help="--max-num-seqs")
    parser.add_argument("--target-waiting", type=float, default=1.0)
    parser.add_argument("--slo-ttft-s", type=float, default=2.0)
    parser.add_argument("--probe-s", type=float, default=2.0)
    parser.add_argument("--phases", choices=("node", "replica"), default="node")
    parser.add_argument("--cold-start-s", default="1,3", help="low,high of a new engine's start")
    parser.add_argument("--stop-s", type=float, default=1.0, help="a drained engine's stop")
    parser.add_argument("--overhead-s", type=float, default=0.01, help="the gateway's and the client's share")
    parser.add_argument("--lead-s", type=float, default=3.0, help="probes before the trace")
    args = parser.parse_args()
    args.cold_start_s = tuple(float(v) for v in args.cold_start_s.split(","))
    for scale in (float(v) for v in args.scales.split(",")):
        for service_s in (float(v) for v in args.service_s.split(",")):
            print(json.dumps(replay_scale(args, scale, service_s)), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
