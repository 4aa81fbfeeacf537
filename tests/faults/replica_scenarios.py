"""Scenarios of the panel on two of everything (tests/faults/stack.py REPLICAS): one replica killed while the
other carries on.

- web-replica-with-viewers: dashboards hold websockets through the stack's one address (tests/faults/proxy.py)
  to a node's live metrics; one of the two web servers is SIGKILLed. Its viewers must be back on the other
  within RECONNECT_LIMIT_S, and miss no sample the protocol promises: live frames are best-effort, and what a
  viewer missed is in GET /api/v1/nodes/{name}/metrics/ (the ring, at full resolution), so live frames plus
  that fetch must hold every sample of the outage without a hole.
- beat-leader: the beat that holds the leader lock is SIGKILLed and kept down; the standby must take the lead
  (beat_takeover_s) and its sweeps must run: an engine killed after the takeover is restarted by the
  reconcile loop, which only beat's ticks drive.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import threading
import time
from datetime import datetime

import redis
from websockets.sync.client import connect

from tests.faults.checks import SETTLE_S, HolderWatch, Outcome, delete_and_release, settle
from tests.faults.scenarios import (
    Scenario,
    agent,
    create_deployment,
    engine_pid,
    kill_then_restart,
    wait_deployment,
)
from tests.faults.stack import REPLICAS, FaultStack, StackError, wait_until

VIEWERS = 4
RECONNECT_LIMIT_S = 5.0
SAMPLE_EVERY_S = 1.0  # the scenario's agent sends metrics this often
HOLE_S = 2.5 * SAMPLE_EVERY_S  # two samples further apart than this: one is missing between them
BEAT_KEY = "ascend-panel:beat"  # settings.PANEL_BEAT_KEY's default: panel/beat.py's keys start with it
SWEEPS = ("reconcile-deployments", "reap-operations")  # beat entries that must keep running (panel.beat)


class Viewer(threading.Thread):
    """A dashboard's websocket on one node's metrics that reconnects (and subscribes again) at once when its
    connection drops, as static/js/live.js does. Records every sample time it got and each drop."""

    def __init__(self, url: str, token: str, node: str):
        super().__init__(daemon=True)
        self.url, self.token, self.group = url, token, f"node.{node}"
        self.samples: list[tuple[float, float]] = []  # (received at, sample time), both epoch seconds
        self.drops: list[float] = []
        self.stopping = threading.Event()

    def run(self) -> None:
        while not self.stopping.is_set():
            # The web server went away mid-frame, or refused while restarting: reconnect.
            with contextlib.suppress(Exception):
                self._watch()
            if not self.stopping.is_set():
                if not self.drops or self.drops[-1] < self._last_received():
                    self.drops.append(time.time())
                time.sleep(0.1)

    def _last_received(self) -> float:
        return self.samples[-1][0] if self.samples else 0.0

    def _watch(self) -> None:
        headers = {"Authorization": f"Bearer {self.token}"}
        with connect(self.url, additional_headers=headers, open_timeout=5) as socket:
            socket.send(json.dumps({"type": "subscribe", "groups": [self.group]}))
            while not self.stopping.is_set():
                with contextlib.suppress(TimeoutError):
                    self._take(json.loads(socket.recv(timeout=1)))

    def _take(self, message) -> None:
        for frame in message if isinstance(message, list) else [message]:
            if frame.get("type") == "metrics" and frame.get("group") == self.group:
                self.samples.append((time.time(), datetime.fromisoformat(frame["time"]).timestamp()))

    def first_drop_after(self, moment: float) -> float | None:
        return min((drop for drop in self.drops if drop >= moment), default=None)

    def frames_after(self, moment: float) -> int:
        return sum(1 for received, _ in self.samples if received > moment)


def viewers(stack: FaultStack, scenario: Scenario, node: str, outcome: Outcome) -> None:
    stack.stop_program(agent(node))
    stack.start_agent(node, {"ASCEND_PANEL_METRICS_S": str(SAMPLE_EVERY_S)})
    url = f"ws://127.0.0.1:{stack.web_port}/ws/"
    watching = [Viewer(url, stack.token, node) for _ in range(VIEWERS)]
    for viewer in watching:
        viewer.start()
    try:
        wait_until(lambda: all(len(v.samples) >= 3 for v in watching), 60, "live metrics on every dashboard")
        busiest = stack.proxy.busiest_backend()
        target = next(name for name, port in stack.web_ports.items() if port == busiest)
        outcome.details["killed"] = target
        killed = time.time()  # wall time, as the viewers' records are
        kill_then_restart(stack, target)
        wait_until(lambda: all(v.frames_after(killed) >= 3 for v in watching), 60, "frames after the kill")
    finally:
        for viewer in watching:
            viewer.stopping.set()
        for viewer in watching:
            viewer.join(5)
    dropped = [v for v in watching if v.first_drop_after(killed) is not None]
    outcome.hit_mid = bool(dropped)
    reconnects = [_reconnect_s(v, killed) for v in dropped]
    outcome.details["viewers_dropped"] = len(dropped)
    outcome.details["reconnect_s_max"] = round(max(reconnects, default=0.0), 2)
    if outcome.details["reconnect_s_max"] > RECONNECT_LIMIT_S:
        outcome.problems.append(f"a viewer took {outcome.details['reconnect_s_max']} s to get frames again")
    for viewer in dropped:
        _check_no_hole(stack, node, viewer, killed, outcome)
    outcome.recovery_s = outcome.details["reconnect_s_max"]


def _reconnect_s(viewer: Viewer, killed: float) -> float:
    """From the drop to the first frame received on the new connection."""
    dropped = viewer.first_drop_after(killed)
    return min(received for received, _ in viewer.samples if received > dropped) - dropped


def _check_no_hole(stack: FaultStack, node: str, viewer: Viewer, killed: float, outcome: Outcome) -> None:
    """What a dashboard does after it reconnects: fetch the samples since the last one it holds, at full
    resolution. Live and fetched together must have every sample from before the drop to after it."""
    dropped = viewer.first_drop_after(killed)
    before = [sample for received, sample in viewer.samples if received <= dropped]
    after = [sample for received, sample in viewer.samples if received > dropped]
    if not before or len(after) < 2:
        outcome.problems.append(f"a viewer had {len(before)} samples before its drop and {len(after)} after")
        return
    since = datetime.fromtimestamp(before[-1]).astimezone().isoformat()
    fetched = stack.get(f"/api/v1/nodes/{node}/metrics/", since=since, step="1")["time"]
    window = sorted({*before[-1:], *after[:2], *(t for t in fetched if t <= after[1])})
    holes = [(a, b) for a, b in zip(window, window[1:], strict=False) if b - a > HOLE_S]
    # The history answers in buckets of `step` (1 s) that start on the whole second.
    missing_live = [t for t in after[:2] if int(t) not in fetched]
    outcome.lost_events += len(holes)
    if holes or missing_live:
        outcome.problems.append(
            f"samples around the drop: holes {holes}, live samples not served over REST {missing_live}"
        )
    outcome.details.setdefault("samples_fetched_after_drop", []).append(len(fetched))


def beat_leader(stack: FaultStack, scenario: Scenario, node: str, outcome: Outcome) -> None:
    watch = HolderWatch(stack.sim_roots[node])
    created = create_deployment(stack, node, f"{scenario.name}-d")
    wait_deployment(stack, created["id"], "running")
    panel_redis = redis.Redis.from_url(stack.env["REDIS_URL"], decode_responses=True)
    key = stack.env.get("PANEL_BEAT_KEY", BEAT_KEY)
    leader = wait_until(lambda: panel_redis.get(f"{key}:leader"), 30, "a beat to lead")
    killed = _beat_named(stack, _pid_of(leader))
    outcome.hit_mid = True
    stack.kill(killed)  # kept down until another leads: the takeover is the standby's, not the restart's
    killed_at, killed_wall = time.monotonic(), time.time()

    def new_leader():
        holder = panel_redis.get(f"{key}:leader")
        return holder if holder not in (None, leader) else None

    standby = _beat_named(stack, _pid_of(wait_until(new_leader, 60, "another beat to lead")))
    outcome.details["beat_takeover_s"] = round(time.monotonic() - killed_at, 2)
    outcome.details["leads_now"] = standby
    stack.restart(killed)

    def swept_since_the_kill():
        runs = panel_redis.hgetall(f"{key}:last-run")
        return all(
            datetime.fromisoformat(runs.get(s, "1970-01-01T00:00:00+00:00")).timestamp() > killed_wall
            for s in SWEEPS
        )

    wait_until(swept_since_the_kill, 30, f"{', '.join(SWEEPS)} to run under the new leader")
    pid = engine_pid(stack, created["id"], node)
    os.kill(pid, signal.SIGKILL)  # only the reconcile loop, which the leading beat drives, starts a new one
    wait_until(lambda: engine_pid(stack, created["id"], node) not in (None, pid), SETTLE_S, "a new engine")
    settle(stack, node, outcome, killed_at, {created["id"]: None}, watch)
    delete_and_release(stack, node, outcome, watch, [created["id"]])
    panel_redis.close()


def _pid_of(holder: str) -> int:
    """The pid in a leader lock's value, hostname:pid:nonce (panel.beat.LeaderScheduler.me)."""
    return int(holder.split(":")[-2])


def _beat_named(stack: FaultStack, pid: int) -> str:
    for name in REPLICAS["beat"]:
        with contextlib.suppress(StackError):
            if stack.pid(name) == pid:
                return name
    raise StackError(f"no beat of the stack has pid {pid}")
