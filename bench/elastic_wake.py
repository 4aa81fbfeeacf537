"""bench/elastic.py's scale-to-zero phase: a deployment that goes idle, sleeps, and is woken by its first
requests (issue 36: a request to a sleeping deployment is answered within its wake time + 1 s).

The deployment: one replica with `idle: {sleep_after_s: 60, level: 1}` (the spec's least) and `autoscale:
{min: 0, max: 1, down_after_s}` (min 0 with sleep is scale-to-zero: the leader's step puts the last engine
to sleep once nothing ran, waited or was routed for `down_after_s`). Each round waits until the panel says
it sleeps (GET .../sleep/), then sends `concurrent` streamed requests at once through the gateway: every
one is held while one wake runs, then served. Its engine runs as many sequences as a round sends, so a
request waits for the wake and not for a slot.

Per request: its time to the first token, against the wake time the gateway measured for that round (the
`wake` decision's figures.wake_s, from /wake_up to /is_sleeping false). Per round: how many `wake`
decisions it caused (one: concurrent first requests wait for one wake).
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import time

import httpx

from bench.api_race import Panel

ASLEEP_TIMEOUT_S = 120


IDLE_SLEEP_AFTER_S = 60  # the least `idle.sleep_after_s` a spec takes; the autoscaler's min 0 sleeps sooner


def zero_spec(name: str, base: dict, quiet_s: int, concurrent: int) -> dict:
    engine = {**base["engine"], "extra_flags": {"--max-num-seqs": max(concurrent, 1)}}
    return {
        **base,
        "name": name,
        "engine": engine,
        "replicas": 1,
        "idle": {"sleep_after_s": IDLE_SLEEP_AFTER_S, "level": 1},
        "autoscale": {
            "min": 0,
            "max": 1,
            "target": {"waiting_per_replica": 1},
            "up_after_s": 5,
            "down_after_s": max(5, quiet_s),
        },
    }


def wait_asleep(panel: Panel, name: str) -> float:
    """Seconds until the panel says the deployment sleeps."""
    started = time.monotonic()
    while time.monotonic() - started < ASLEEP_TIMEOUT_S:
        answer = panel.client.get(f"/deployments/{name}/sleep/")
        if answer.status_code == 200 and answer.json().get("sleep") == "asleep":
            return time.monotonic() - started
        time.sleep(0.5)
    raise SystemExit(f"{name} did not go to sleep within {ASLEEP_TIMEOUT_S} s")


def wakes(panel: Panel, name: str) -> list[dict]:
    events = panel.client.get(f"/deployments/{name}/events/", params={"kind": "wake"}).json()
    return events.get("results") or []


async def first_requests(panel: Panel, name: str, count: int, tokens: int, one_request) -> list[tuple]:
    async with httpx.AsyncClient(base_url=panel.url, headers=panel.headers, timeout=180) as client:
        return await asyncio.gather(*(one_request(client, name, tokens) for _ in range(count)))


def zero_phase(panel: Panel, name: str, body: dict, args, one_request) -> dict:
    """Rounds of sleep then concurrent first requests; the figures for the bench's last line."""
    panel.client.put(f"/deployments/{name}/", json=body).raise_for_status()
    panel.settled(name)
    asyncio.run(first_requests(panel, name, 1, 2, one_request))  # awake and answering before the rounds
    rounds = []
    for _round in range(args.wake_rounds):
        asleep_after = wait_asleep(panel, name)
        before = len(wakes(panel, name))
        results = asyncio.run(first_requests(panel, name, args.wake_concurrent, args.tokens, one_request))
        deadline = time.monotonic() + 10  # the gateway's wake decision is written by the panel worker
        while len(wakes(panel, name)) == before and time.monotonic() < deadline:
            time.sleep(0.5)
        time.sleep(1.0)  # a second wake, were there one, is recorded by now too
        new = wakes(panel, name)[: max(0, len(wakes(panel, name)) - before)]
        wake_s = new[-1]["figures"].get("wake_s") if new else None
        rounds.append({"results": results, "wake_s": wake_s, "wakes": len(new), "asleep_s": asleep_after})
    panel.client.delete(f"/deployments/{name}/")
    panel.gone(name)
    return summary(rounds, name)


def summary(rounds: list[dict], name: str) -> dict:
    within = answered = failed = 0
    firsts = []
    for r in rounds:
        for ok, first, _why in r["results"]:
            if not ok or first is None:
                failed += 1
                continue
            answered += 1
            firsts.append(first)
            within += r["wake_s"] is not None and first <= r["wake_s"] + 1.0
    wake_times = [r["wake_s"] for r in rounds if r["wake_s"] is not None]
    print(
        f"{name}: {len(rounds)} rounds, wakes per round {[r['wakes'] for r in rounds]}, wake_s "
        f"{wake_times}, first token s max {max(firsts) if firsts else None}, asleep after "
        f"{[round(r['asleep_s'], 1) for r in rounds]} s, failed {failed}",
        file=sys.stderr,
    )
    requests = answered + failed
    return {
        "wake_s_p50": round(statistics.median(wake_times), 3) if wake_times else None,
        "answered_within_wake_plus_1s": round(within / requests, 4) if requests else None,
        "first_token_s_max": round(max(firsts), 3) if firsts else None,
        "wakes_per_round": [r["wakes"] for r in rounds],
        "failed": failed,
        "requests": requests,
    }
