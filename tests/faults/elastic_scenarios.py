"""Fault scenarios of elastic serving (issue 36; docs/serving-plane.md §3-§4), on the shared stack.

- worker-mid-scale-up: a deployment with `autoscale:` (max 2, --max-num-seqs 1) under a queue of streamed
  requests through the gateway; once the leader recorded its `scale_up` (pending: the new replica is
  planned, its launch under way), both panel workers are SIGKILLed and restarted. The step must complete
  (or be taken again on a later tick), exactly one replica more (no duplicate row, no second engine), and
  the decision settled `done` once the replica serves.
- engine-dies-asleep: an `idle:` deployment is put to sleep by hand, then its engine is SIGKILLed. The sleep
  state must not hide the dead engine: a request sent at once is answered within REQUEST_LIMIT_S, either
  served or with a clear 503 (never held forever), the reconcile loop starts a new engine, the deployment
  shows awake, and a request is served again.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time

import httpx

from tests.faults.checks import SETTLE_S, HolderWatch, Outcome, delete_and_release, settle
from tests.faults.scenarios import Scenario, engine_pid, kill_and_restart, wait_deployment
from tests.faults.stack import FaultStack, StackError, wait_until

MODEL = "tiny-faults"  # the model tests/faults/stack.py registers
CLIENTS = 4  # streamed requests in flight at once: with one sequence per engine, three wait
TOKENS = 300  # each answer takes about 3 s at the sim's 10 ms a token
REQUEST_LIMIT_S = 30.0  # a request to an engine that died asleep is answered within this: never a hang
CLEAR_CODES = ("wake_failed", "no_healthy_replica")


def _put(stack: FaultStack, name: str, spec: dict) -> dict:
    answer = stack.call("PUT", f"/api/v1/deployments/{name}/", json=spec)
    if answer.status_code not in (200, 201):
        raise StackError(f"PUT /deployments/{name}/ answered {answer.status_code}: {answer.text[:300]}")
    return answer.json()


def _spec(stack: FaultStack, node: str, **extra) -> dict:
    return {
        "model": MODEL,
        "path": str(stack.model_path),
        "placement": {"node": node, "npus": 1},
        "engine": {"max_model_len": 2048, "extra_flags": {"--max-num-seqs": 1}},
        **extra,
    }


def ask(stack: FaultStack, name: str, timeout: float = REQUEST_LIMIT_S) -> tuple[int | None, str, float]:
    """One streamed chat through the gateway: (status or None when it hung up or timed out, the error code
    or "", seconds until the answer ended)."""
    body = {"model": name, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8, "stream": True}
    started = time.monotonic()
    try:
        with stack.api.stream("POST", "/v1/chat/completions", json=body, timeout=timeout) as answer:
            text = "".join(answer.iter_text())
    except httpx.HTTPError as error:
        return None, type(error).__name__, round(time.monotonic() - started, 2)
    code = ""
    if answer.status_code != 200:
        code = (json.loads(text) if text.startswith("{") else {}).get("error", {}).get("code") or text[:80]
    return answer.status_code, code, round(time.monotonic() - started, 2)


class Load(threading.Thread):
    """CLIENTS streamed requests in flight through the gateway until stopped; counts what failed."""

    def __init__(self, stack: FaultStack, name: str):
        super().__init__(daemon=True)
        self.url, self.token, self.name = f"http://127.0.0.1:{stack.web_port}", stack.token, name
        self.stopping = threading.Event()
        self.answers: dict[str, int] = {}

    def run(self) -> None:
        threads = [threading.Thread(target=self._client, daemon=True) for _ in range(CLIENTS)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

    def _client(self) -> None:
        body = {"model": self.name, "messages": [{"role": "user", "content": "go"}], "max_tokens": TOKENS}
        headers = {"Authorization": f"Bearer {self.token}"}
        with httpx.Client(base_url=self.url, headers=headers, timeout=120) as http:
            while not self.stopping.is_set():
                try:
                    status = str(
                        http.post("/v1/chat/completions", json={**body, "stream": False}).status_code
                    )
                except httpx.HTTPError as error:  # the proxy's web server restarted under it: a finding only
                    status = type(error).__name__
                self.answers[status] = self.answers.get(status, 0) + 1
                if status != "200":
                    time.sleep(0.5)

    def stop(self) -> None:
        self.stopping.set()
        self.join(150)


def _decision(stack: FaultStack, name: str, kind: str) -> dict | None:
    found = stack.get(f"/api/v1/deployments/{name}/events/", kind=kind)["results"]
    return found[0] if found else None


def worker_mid_scale_up(stack: FaultStack, scenario: Scenario, node: str, outcome: Outcome) -> None:
    watch = HolderWatch(stack.sim_roots[node])
    name = f"{scenario.name}-d"
    scale = {"min": 1, "max": 2, "target": {"waiting_per_replica": 1}, "up_after_s": 5, "down_after_s": 3600}
    _put(stack, name, _spec(stack, node, autoscale=scale))
    wait_deployment(stack, name, "running")
    load = Load(stack, name)
    load.start()
    try:
        step = wait_until(lambda: _decision(stack, name, "scale_up"), 90, "the leader's scale_up")
        outcome.hit_mid = step["outcome"] == "pending"
        killed_at = kill_and_restart(stack, scenario, node)
        try:
            settled = wait_until(
                lambda: (d := _decision(stack, name, "scale_up")) and d["outcome"] != "pending" and d,
                SETTLE_S,
                "the scale_up decision to settle",
                0.5,
            )
            outcome.details["scale_up"] = settled["outcome"]
            if settled["outcome"] != "done":
                outcome.problems.append(
                    f"scale_up settled {settled['outcome']}: {settled.get('outcome_reason')}"
                )
        except AssertionError as error:
            outcome.problems.append(str(error))
    finally:
        load.stop()
    outcome.details["load_answers"] = load.answers
    body = stack.get(f"/api/v1/deployments/{name}/")
    rows = [name, *(r["name"] for r in body.get("replicas") or [] if r["desired_state"] != "deleted")]
    outcome.details["rows"] = rows
    steps = stack.get(f"/api/v1/deployments/{name}/events/", kind="scale_up")["count"]
    if (body["replicas_wanted"], len(rows), len(set(rows)), steps) != (2, 2, 2, 1):
        outcome.double_runs += int(len(rows) > 2 or steps > 1)
        outcome.problems.append(
            f"wanted {body['replicas_wanted']}, rows {rows}, {steps} scale_up decisions: one step to 2"
        )
    settle(stack, node, outcome, killed_at, dict.fromkeys(rows), watch)
    if len(watch.live()) != 2:
        outcome.double_runs += int(len(watch.live()) > 2)
        outcome.problems.append(f"{len(watch.live())} engines live on the host for 2 rows")
    delete_and_release(stack, node, outcome, watch, [name])


def engine_dies_asleep(stack: FaultStack, scenario: Scenario, node: str, outcome: Outcome) -> None:
    watch = HolderWatch(stack.sim_roots[node])
    name = f"{scenario.name}-d"
    _put(stack, name, _spec(stack, node, idle={"sleep_after_s": 600, "level": 1}))
    wait_deployment(stack, name, "running")
    slept = stack.call("POST", f"/api/v1/deployments/{name}/sleep/", json={"level": 1})
    if slept.status_code != 200:
        raise StackError(f"POST sleep answered {slept.status_code}: {slept.text[:300]}")
    outcome.hit_mid = stack.get(f"/api/v1/deployments/{name}/sleep/")["sleep"] == "asleep"
    pid = engine_pid(stack, name, node)
    if not pid:
        raise StackError("no engine pid to kill")
    os.kill(pid, signal.SIGKILL)
    killed_at = time.monotonic()
    status, code, took = ask(stack, name)
    outcome.details["first_request"] = {"status": status, "code": code, "s": took}
    if status is None:
        outcome.problems.append(f"the request after the engine died asleep got no answer ({code}, {took} s)")
    elif status != 200 and code not in CLEAR_CODES:
        outcome.problems.append(f"the request after the engine died asleep answered {status} {code!r}")
    try:
        wait_until(lambda: engine_pid(stack, name, node) not in (None, pid), SETTLE_S, "a new engine", 0.5)
    except AssertionError as error:
        outcome.problems.append(str(error))
    settle(stack, node, outcome, killed_at, {name: None}, watch)
    state = stack.get(f"/api/v1/deployments/{name}/sleep/")["sleep"]
    outcome.details["sleep_after_restart"] = state
    if state != "awake":
        outcome.problems.append(f"the restarted engine shows {state}, not awake")
    try:
        served = wait_until(lambda: (a := ask(stack, name))[0] == 200 and a, 60, "a request served again", 1)
        outcome.details["served_again_s"] = served[2]
    except AssertionError as error:
        outcome.problems.append(str(error))
    outcome.details["decisions"] = [
        f"{d['kind']}:{d['outcome']}" for d in stack.get(f"/api/v1/deployments/{name}/events/")["results"]
    ]
    delete_and_release(stack, node, outcome, watch, [name])
