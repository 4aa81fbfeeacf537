"""A request to a sleeping deployment, through the gateway: how long until it is answered, against the
engine's own wake time (issue 36: answered within its wake time + 1 s).

    .venv/bin/python bench/wake.py [--rounds 5] [--concurrent 8] [--wake-s-level1 1.0] [--wake-s-level2 4.0]

Real parts: the whole panel as `make run` starts it (python -m panel.run: web with the /v1 gateway, panel
worker, beat, agents on the simulated hosts, embedded Redis) on a scratch data directory and free ports; one
`idle:` deployment of the tiny chat model on sim-a2 (its sim engine launched by the panel with
--enable-sleep-mode and dev mode; its wake takes SIM_ENGINE_WAKE_S_LEVEL1 / _LEVEL2 seconds). Each round puts
it to sleep through the API (POST /deployments/NAME/sleep/ at level 1, then at level 2), then sends
--concurrent chat requests at once through <panel>/v1: each is held while one wake runs, then served. The
figure per request is the client's time to its whole answer; the wake time is the `wake` decision's
figures.wake_s (what the gateway measured from /wake_up to /is_sleeping false).

Last line JSON: {"wake_s_p50": {"level1", "level2"}, "answer_s_p50": {...}, "answer_s_max": {...},
"over_wake_plus_1s": n, "wakes_per_round": {...}, "failed": n, "requests": n}. Targets: over_wake_plus_1s 0
(every answer within the round's wake time + 1 s), one wake per round, failed 0.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.api_race import MODEL, NODE, Panel, sign_in, start_panel, wait_for_model  # noqa: E402

NAME = "wake-bench"
PROMPT = [{"role": "user", "content": "hello"}]


async def first_requests(url: str, headers: dict, count: int) -> list[tuple[bool, float]]:
    async def one(client: httpx.AsyncClient) -> tuple[bool, float]:
        started = time.monotonic()
        try:
            answer = await client.post(
                "/v1/chat/completions", json={"model": NAME, "messages": PROMPT, "max_tokens": 4}
            )
            return answer.status_code == 200, time.monotonic() - started
        except httpx.HTTPError:
            return False, time.monotonic() - started

    async with httpx.AsyncClient(base_url=url, headers=headers, timeout=120) as client:
        return await asyncio.gather(*(one(client) for _ in range(count)))


def wakes(panel: Panel) -> list[dict]:
    events = panel.client.get(f"/deployments/{NAME}/events/", params={"kind": "wake"}).json()
    return events.get("results") or []


def round_of(panel: Panel, level: int, concurrent: int) -> dict:
    before = len(wakes(panel))
    panel.client.post(f"/deployments/{NAME}/sleep/", json={"level": level}).raise_for_status()
    results = asyncio.run(first_requests(panel.url, panel.headers, concurrent))
    time.sleep(1.5)  # the gateway's wake decision is recorded by the panel worker
    new = wakes(panel)[: max(0, len(wakes(panel)) - before)]
    wake_s = new[0]["figures"].get("wake_s") if new else None
    return {"results": results, "wake_s": wake_s, "wakes": len(new)}


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=5, help="sleeps and wakes per level")
    parser.add_argument("--concurrent", type=int, default=8, help="first requests sent at once")
    parser.add_argument("--wake-s-level1", type=float, default=1.0)
    parser.add_argument("--wake-s-level2", type=float, default=4.0)
    args = parser.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="wake-"))  # kept when the bench fails: its logs say why
    engine_env = {
        "SIM_ENGINE_START_DELAY": "0.5",
        "SIM_ENGINE_WAKE_S_LEVEL1": str(args.wake_s_level1),
        "SIM_ENGINE_WAKE_S_LEVEL2": str(args.wake_s_level2),
    }
    process, url = start_panel(scratch, extra_env=engine_env)
    per_level: dict[str, list[dict]] = {"level1": [], "level2": []}
    try:
        panel = Panel(url, sign_in(url))
        wait_for_model(panel)
        body = {
            "name": NAME, "model": MODEL, "placement": {"node": NODE, "npus": 1},
            "engine": {"max_model_len": 1024}, "idle": {"sleep_after_s": 3600, "level": 1},
        }  # fmt: skip
        panel.client.put(f"/deployments/{NAME}/", json=body).raise_for_status()
        panel.settled(NAME)
        asyncio.run(first_requests(url, panel.headers, 1))  # awake and answering before the first sleep
        for _round in range(args.rounds):
            for level in (1, 2):
                per_level[f"level{level}"].append(round_of(panel, level, args.concurrent))
    finally:
        process.terminate()  # panel.run stops its children and the sim engines
        process.wait(60)
    shutil.rmtree(scratch, ignore_errors=True)
    summary: dict = {"wake_s_p50": {}, "answer_s_p50": {}, "answer_s_max": {}, "wakes_per_round": {}}
    over = failed = requests = 0
    for label, rounds in per_level.items():
        answers = [took for r in rounds for ok, took in r["results"] if ok]
        wake_times = [r["wake_s"] for r in rounds if r["wake_s"] is not None]
        summary["wake_s_p50"][label] = round(statistics.median(wake_times), 3) if wake_times else None
        summary["answer_s_p50"][label] = round(statistics.median(answers), 3) if answers else None
        summary["answer_s_max"][label] = round(max(answers), 3) if answers else None
        summary["wakes_per_round"][label] = sorted({r["wakes"] for r in rounds})
        for r in rounds:
            requests += len(r["results"])
            failed += sum(1 for ok, _took in r["results"] if not ok)
            if r["wake_s"] is not None:
                over += sum(1 for ok, took in r["results"] if ok and took > r["wake_s"] + 1.0)
    print(json.dumps({**summary, "over_wake_plus_1s": over, "failed": failed, "requests": requests}))
    return 0 if failed == 0 and over == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
