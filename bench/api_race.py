"""Parallel pipelines against one deployment: one change at a time, creates that race answer 409.

    .venv/bin/python bench/api_race.py [--rounds 3] [--sizes 5,20,50] [--url URL --token TOKEN]
    .venv/bin/python bench/api_race.py --serving [--rps 5]

Real parts: without --url, the whole panel as `make run` starts it (python -m panel.run: web, panel
worker, beat, agents on the simulated hosts sim-a2 and sim-duo, embedded Redis) on a scratch data
directory and free ports; deployments serve the tiny chat model every sim host carries.

Races (default): each round, for each N in --sizes,
  - N parallel applies (PUT, each a different engine.max_model_len) to one running deployment: at most one
    is taken (201/202), the others answer 409 naming what runs, none 5xx; once its rollout ended, the
    deployment's spec holds the value of the one taken, and one rollout at most started;
  - N parallel creates (PUT) of one new name: one 201, the rest 409 (or 200 unchanged once it exists), no
    5xx; then it is deleted.
Last line: {"rounds", "server_errors", "accepted_changes_per_round_max", "final_is_last_accepted",
"rollouts_started_per_round_max", "conflicts"}: `conflicts` counts the applies' 409s by what they said
("turn": another change under way or made meanwhile, which `--wait-for-lock` waits out; "downtime": a
confirmation asked for, which a race should never be answered with).

--serving: a one-replica deployment with room for a surge, a steady client (--rps chat completions a
second through the panel's /v1 gateway) while it is edited (a new max_model_len), rolled back (rollout
undo) and restarted (rollout restart), each waited for. Last line: {"requests", "failed_requests",
"changes": [...]}.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
NODE = "sim-a2"
MODEL = "tiny-chat"
PASSWORD = "bench-api-race-password"  # noqa: S105 (a scratch panel's admin, gone with the bench)
START_TIMEOUT_S = 600  # migrate, sim hosts, the demo model inspected on each: minutes on a busy machine
INHERITED_NOT = ("DATABASE_URL", "REDIS_URL", "CELERY_BROKER_URL")  # the scratch panel's own
SETTLE_TIMEOUT_S = 240


def start_panel(scratch: Path, extra_env: dict[str, str] | None = None) -> tuple[subprocess.Popen, str]:
    """panel.run on `scratch` and free ports (`extra_env` on top: bench/elastic.py's sim engine timings)."""
    from panel.run import free_port
    from tests.deployment_helpers import free_port_pair

    port = free_port()
    env = {
        **{
            k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL", "CELERY_BROKER_URL")
        },
        "PANEL_DATA_DIR": str(scratch),
        "PANEL_PORT": str(port),
        "PANEL_ADMIN_PASSWORD": PASSWORD,
        "PANEL_DEPLOY_BASE_PORT": str(free_port_pair()),
        "LOG_LEVEL": "WARNING",
        **(extra_env or {}),
    }
    log = (scratch / "run.log").open("ab")
    process = subprocess.Popen(
        [sys.executable, "-m", "panel.run"], cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"panel.run exited with {process.returncode}: see {scratch / 'run.log'}")
        if "Ascend Panel is running" in (scratch / "run.log").read_text(errors="replace"):
            return process, url
        time.sleep(1)
    process.terminate()
    raise SystemExit(f"the panel did not start within {START_TIMEOUT_S} s: see {scratch / 'run.log'}")


def sign_in(url: str) -> str:
    body = {"username": "admin", "password": PASSWORD, "name": "bench api_race"}
    answer = httpx.post(f"{url}/api/v1/tokens/sign-in/", json=body, timeout=30)
    answer.raise_for_status()
    return answer.json()["token"]


class Panel:
    def __init__(self, url: str, token: str):
        self.url = url
        self.headers = {"Authorization": f"Bearer {token}"}
        self.client = httpx.Client(base_url=f"{url}/api/v1", headers=self.headers, timeout=120)

    def deployment(self, name: str) -> dict | None:
        answer = self.client.get(f"/deployments/{name}/")
        return answer.json() if answer.status_code == 200 else None

    def settled(self, name: str, timeout: float = SETTLE_TIMEOUT_S) -> dict:
        """Wait until the deployment runs every replica it wants and no rollout is under way."""
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            last = self.deployment(name)
            rollout = (last or {}).get("rollout") or {}
            replicas = [r for r in (last or {}).get("replicas") or [] if r.get("desired_state") != "deleted"]
            if (
                last is not None
                and last["status"] == "running"
                and rollout.get("status") != "running"
                and all(r["status"] == "running" for r in replicas)
                and 1 + len(replicas) == last.get("replicas_wanted", 1)
            ):
                return last
            if last is not None and last["status"] == "failed":
                raise SystemExit(f"{name} failed: {last.get('reason')}")
            time.sleep(0.5)
        raise SystemExit(f"{name} did not settle within {timeout} s: {json.dumps(last)[:800]}")

    def gone(self, name: str, timeout: float = SETTLE_TIMEOUT_S) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.deployment(name) is None:
                return
            time.sleep(0.5)
        raise SystemExit(f"{name} was not gone within {timeout} s")


def spec(name: str, max_model_len: int = 1024) -> dict:
    return {
        "name": name,
        "model": MODEL,
        "placement": {"node": NODE, "npus": 1},
        "engine": {"max_model_len": max_model_len},
    }


def wait_for_model(panel: Panel) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        answer = panel.client.get(f"/models/{MODEL}/")
        if answer.status_code == 200 and any(a["ready"] for a in answer.json()["artifacts"]):
            return
        time.sleep(1)
    raise SystemExit(f"{MODEL} was not ready on {NODE}")


def in_parallel(panel: Panel, bodies: list[tuple[str, dict]]) -> list[httpx.Response | Exception]:
    """PUT each (name, spec) at once from its own connection (a barrier lines them up)."""
    barrier = threading.Barrier(len(bodies))
    answers: list[httpx.Response | Exception] = [RuntimeError("not sent")] * len(bodies)

    def send(index: int, name: str, body: dict) -> None:
        with httpx.Client(base_url=f"{panel.url}/api/v1", headers=panel.headers, timeout=300) as client:
            barrier.wait()
            try:
                answers[index] = client.put(f"/deployments/{name}/", json=body)
            except httpx.HTTPError as error:
                answers[index] = error

    threads = [threading.Thread(target=send, args=(i, n, b)) for i, (n, b) in enumerate(bodies)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return answers


def statuses(answers) -> Counter:
    return Counter(a.status_code if isinstance(a, httpx.Response) else "error" for a in answers)


def unexpected(answers) -> list[str]:
    """What answers other than 200, 201, 202 and 409 said (at most three): none is expected."""
    said = [
        f"{a.status_code} {a.text[:200]}" if isinstance(a, httpx.Response) else repr(a)
        for a in answers
        if not isinstance(a, httpx.Response) or a.status_code not in (200, 201, 202, 409)
    ]
    return said[:3]


def conflict_kind(answer: httpx.Response) -> str:
    """What a 409 stood on: "downtime" when it asks for allow_downtime, else "turn" (another change)."""
    return "downtime" if "allow_downtime" in (answer.json().get("errors") or {}) else "turn"


def race_applies(panel: Panel, name: str, size: int, base: int) -> dict:
    values = [base + 8 * i for i in range(size)]
    answers = in_parallel(panel, [(name, spec(name, value)) for value in values])
    counted = statuses(answers)
    taken = [
        (value, answer.json())
        for value, answer in zip(values, answers, strict=True)
        if isinstance(answer, httpx.Response) and answer.status_code in (201, 202)
    ]
    rollouts = {a["rollout"]["id"] for _v, a in taken if a.get("rollout")}
    refused = [a for a in answers if isinstance(a, httpx.Response) and a.status_code == 409]
    panel.settled(name)
    final = panel.client.get(f"/deployments/{name}/", params={"format": "spec"}).json()
    final_value = final["engine"]["max_model_len"]
    return {
        "statuses": dict(counted),
        "server_errors": sum(n for code, n in counted.items() if code == "error" or code >= 500),
        "accepted": len(taken),
        "rollouts": len(rollouts),
        "final_is_last_accepted": len(taken) == 1 and final_value == taken[0][0],
        "unexpected": unexpected(answers),
        "conflicts": dict(Counter(conflict_kind(a) for a in refused)),
        "conflict_says": refused[0].json()["detail"] if refused else "",
    }


def race_creates(panel: Panel, name: str, size: int) -> dict:
    answers = in_parallel(panel, [(name, spec(name))] * size)
    counted = statuses(answers)
    created = counted.get(201, 0)
    panel.client.delete(f"/deployments/{name}/")
    panel.gone(name)
    return {
        "statuses": dict(counted),
        "server_errors": sum(n for code, n in counted.items() if code == "error" or code >= 500),
        "accepted": created,
        "unexpected": unexpected(answers),
    }


def races(panel: Panel, rounds: int, sizes: list[int]) -> dict:
    name = "race"
    panel.client.put(f"/deployments/{name}/", json=spec(name)).raise_for_status()
    panel.settled(name)
    errors, accepted_max, rollouts_max, final_ok = 0, 0, 0, True
    conflicts: Counter = Counter()
    base = 512
    for round_number in range(1, rounds + 1):
        for size in sizes:
            base = 1536 if base == 512 else 512  # every value differs from the one before
            applied = race_applies(panel, name, size, base)
            created = race_creates(panel, f"race-new-{round_number}-{size}", size)
            print(json.dumps({"round": round_number, "n": size, "applies": applied, "creates": created}))
            errors += applied["server_errors"] + created["server_errors"]
            accepted_max = max(accepted_max, applied["accepted"], created["accepted"])
            rollouts_max = max(rollouts_max, applied["rollouts"])
            conflicts.update(applied["conflicts"])
            final_ok = final_ok and applied["final_is_last_accepted"] and created["accepted"] == 1
    panel.client.delete(f"/deployments/{name}/")
    return {
        "rounds": rounds,
        "server_errors": errors,
        "accepted_changes_per_round_max": accepted_max,
        "final_is_last_accepted": final_ok,
        "rollouts_started_per_round_max": rollouts_max,
        "conflicts": dict(conflicts),
    }


class SteadyClient(threading.Thread):
    """Chat completions through the gateway at a steady rate; counts what failed."""

    def __init__(self, url: str, headers: dict, served: str, rps: float):
        super().__init__(daemon=True)
        self.url, self.headers, self.served, self.pause = url, headers, served, 1 / rps
        self.sent, self.failed = 0, 0
        self.failures: list[str] = []
        self.stopping = threading.Event()

    def run(self) -> None:
        body = {"model": self.served, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
        with httpx.Client(headers=self.headers, timeout=60) as client:
            while not self.stopping.is_set():
                started = time.monotonic()
                self.sent += 1
                try:
                    answer = client.post(f"{self.url}/v1/chat/completions", json=body)
                    if answer.status_code != 200:
                        self.failed += 1
                        self.failures.append(f"{answer.status_code} {answer.text[:200]}")
                except httpx.HTTPError as error:
                    self.failed += 1
                    self.failures.append(repr(error))
                time.sleep(max(0.0, self.pause - (time.monotonic() - started)))


def serving(panel: Panel, rps: float) -> dict:
    name = "steady"
    panel.client.put(f"/deployments/{name}/", json=spec(name)).raise_for_status()
    panel.settled(name)
    client = SteadyClient(panel.url, panel.headers, name, rps)
    client.start()
    time.sleep(3)
    changes = []

    def change(what: str, send) -> None:
        answer = send()
        ok = answer.status_code in (200, 202)
        rollout = (answer.json() or {}).get("rollout") if ok else None
        changes.append({"change": what, "status": answer.status_code, "rolling": bool(rollout)})
        if not ok:
            print(f"{what}: {answer.status_code} {answer.text[:400]}", file=sys.stderr)
        panel.settled(name)
        time.sleep(2)

    change("edit", lambda: panel.client.put(f"/deployments/{name}/", json=spec(name, 1536)))
    change("rollback", lambda: panel.client.post(f"/deployments/{name}/rollback/"))
    change("restart", lambda: panel.client.post(f"/deployments/{name}/restart/"))
    client.stopping.set()
    client.join(60)
    panel.client.delete(f"/deployments/{name}/")
    for failure in client.failures[:5]:
        print(f"failed: {failure}", file=sys.stderr)
    return {"requests": client.sent, "failed_requests": client.failed, "changes": changes}


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--sizes", default="5,20,50", help="parallel requests per race")
    parser.add_argument(
        "--serving", action="store_true", help="edit, roll back, restart under a steady client"
    )
    parser.add_argument("--rps", type=float, default=5.0)
    parser.add_argument("--url", help="an existing panel (with --token) instead of starting one")
    parser.add_argument("--token")
    args = parser.parse_args()
    process = None
    scratch = Path(tempfile.mkdtemp(prefix="api-race-"))  # kept when the bench fails: its logs say why
    try:
        if args.url:
            url, token = args.url.rstrip("/"), args.token
        else:
            process, url = start_panel(scratch)
            token = sign_in(url)
        panel = Panel(url, token)
        wait_for_model(panel)
        if args.serving:
            result = serving(panel, args.rps)
        else:
            result = races(panel, args.rounds, [int(n) for n in args.sizes.split(",")])
    finally:
        if process is not None:
            process.terminate()  # panel.run stops its children and the sim engines
            process.wait(60)
    shutil.rmtree(scratch, ignore_errors=True)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
