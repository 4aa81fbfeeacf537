"""What every fault scenario must find once the killed process is back, read over REST and from the sim host:
every operation terminal, every deployment in its desired state (a surviving engine adopted, same pid), no
event lost (the panel's seq contiguous per operation, the agent's agent_seq contiguous per attempt), no
operation run twice at once, and the NPUs free again after delete."""

from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import dataclass, field

from tests.faults.stack import FaultStack, wait_until
from workers.sim import state as sim_state

TERMINAL = {"succeeded", "failed", "cancelled"}
SETTLE_S = 90  # bounded waits: a scenario that does not settle within this is reported, not waited on
EVENTS_WAIT_S = 45  # the panel's retry back-off for a batch it could not take reaches 30 s


@dataclass
class Outcome:
    name: str
    target: str
    phase: str
    hit_mid: bool = False  # the kill landed while the work was under way
    recovery_s: float | None = None
    lost_events: int = 0
    stuck_operations: int = 0
    double_runs: int = 0
    problems: list[str] = field(default_factory=list)
    details: dict = field(default_factory=dict)

    @property
    def survived(self) -> bool:
        return not self.problems

    def as_dict(self) -> dict:
        return {
            "scenario": self.name,
            "kills": self.target,
            "during": self.phase,
            "hit_mid": self.hit_mid,
            "survived": self.survived,
            "recovery_s": self.recovery_s,
            "lost_events": self.lost_events,
            "stuck_operations": self.stuck_operations,
            "double_runs": self.double_runs,
            "problems": self.problems,
            **self.details,
        }


def operations(stack: FaultStack, node: str) -> list[dict]:
    return stack.all_pages("/api/v1/operations/", node=node)


def events_of(stack: FaultStack, operation_id: str) -> list[dict]:
    rows, after = [], 0
    while True:
        page = stack.get(f"/api/v1/operations/{operation_id}/events/", after_seq=after)
        rows += page["results"]
        if page["next_after_seq"] is None:
            return rows
        after = page["next_after_seq"]


def _attempt(event: dict) -> int:
    return int(event.get("attempt") or event["payload"].get("attempt") or 1)


def _gaps(numbers: list[int], first: int = 1) -> int:
    """How many numbers are missing from first..max(numbers)."""
    return (max(numbers) - first + 1 - len(set(numbers))) if numbers else 0


def _agent_seq_gaps(events: list[dict]) -> int:
    by_attempt = defaultdict(list)
    for event in events:
        if event.get("agent_seq") is not None:
            by_attempt[_attempt(event)].append(event["agent_seq"])
    return sum(_gaps(numbers) for numbers in by_attempt.values())


def settled_events(stack: FaultStack, operation_id: str) -> list[dict]:
    """The operation's events once none is missing, or as they are after EVENTS_WAIT_S: a batch the panel
    could not take at once (its Redis away) comes again after a back-off, so it may be stored after the
    batch that ended the operation. Late is not lost; still missing after the wait is."""
    deadline = time.monotonic() + EVENTS_WAIT_S
    while True:
        events = events_of(stack, operation_id)
        if not _agent_seq_gaps(events) or time.monotonic() > deadline:
            return events
        time.sleep(1)


def audit_events(stack: FaultStack, operation: dict, outcome: Outcome) -> None:
    """Lost events (gaps in seq, or in agent_seq of one attempt) and double runs (two attempts of one
    operation at the same time, or one attempt that started twice)."""
    events = settled_events(stack, operation["id"])
    label = f"{operation['kind']} {operation['id'][:8]}"
    seqs = [e["seq"] for e in events]
    last = operation.get("final_seq") or operation.get("last_seq") or 0
    missing = set(range(1, max([last, *seqs]) + 1)) - set(seqs)
    if missing:
        outcome.lost_events += len(missing)
        outcome.problems.append(f"{label}: seq {sorted(missing)[:10]} missing of 1..{last}")
    by_attempt = defaultdict(list)
    for event in events:
        by_attempt[_attempt(event)].append(event)
    spans = []
    for attempt, rows in sorted(by_attempt.items()):
        agent_seqs = [e.get("agent_seq") for e in rows if e.get("agent_seq") is not None]
        if gaps := _gaps(agent_seqs):
            outcome.lost_events += gaps
            outcome.problems.append(f"{label} attempt {attempt}: {gaps} agent_seq missing")
        starts = [e for e in rows if e["kind"] == "state" and e["payload"].get("state") == "running"]
        if len(starts) > 1:
            outcome.double_runs += 1
            outcome.problems.append(f"{label} attempt {attempt} started {len(starts)} times")
        times = sorted(e["time"] for e in rows)
        ended = any(e["kind"] == "state" and e["payload"].get("state") in TERMINAL for e in rows)
        spans.append((attempt, times[0], times[-1], ended))
    for (a, _, a_last, a_ended), (b, b_first, _, _) in zip(spans, spans[1:], strict=False):
        if a_ended and b_first < a_last:
            outcome.double_runs += 1
            outcome.problems.append(f"{label}: attempt {b} ran while attempt {a} still did")
    outcome.details.setdefault("attempts", {})[label] = len(by_attempt)


class HolderWatch:
    """Engines holding NPUs on a sim host, sampled while a scenario settles: two live engines on one NPU,
    or two for one deployment, are a double run."""

    def __init__(self, root):
        self.root = root
        self.worst = 0

    def live(self) -> list[dict]:
        return sim_state.live_holders(sim_state.load(self.root))

    def sample(self) -> list[dict]:
        holders = self.live()
        per_chip = defaultdict(int)
        for holder in holders:
            for logic_id in holder["logic_ids"]:
                per_chip[logic_id] += 1
        self.worst = max([self.worst, *per_chip.values()])
        return holders


def settle(
    stack: FaultStack,
    node: str,
    outcome: Outcome,
    killed_at: float,
    deployments: dict[int, int | None] | None = None,
    watch: HolderWatch | None = None,
) -> None:
    """Wait (bounded) until every operation on the node is terminal and every deployment is in its desired
    state; recovery_s is the time from the kill until then. `deployments`: id → the pid of an engine that
    must be adopted (None: any engine)."""
    deployments = deployments or {}

    def settled() -> bool:
        if watch:
            watch.sample()
        open_ops = [o for o in operations(stack, node) if o["status"] not in TERMINAL]
        states = [stack.get(f"/api/v1/deployments/{pk}/") for pk in deployments]
        return not open_ops and all(d["status"] == d["desired_state"] for d in states)

    try:
        wait_until(settled, SETTLE_S, "operations terminal and deployments in their desired state", 0.5)
        outcome.recovery_s = round(time.monotonic() - killed_at, 2)
    except AssertionError as error:
        outcome.problems.append(str(error))
    stuck = [o for o in operations(stack, node) if o["status"] not in TERMINAL]
    outcome.stuck_operations += len(stuck)
    outcome.problems += [f"{o['kind']} {o['id'][:8]} still {o['status']} at {o['stage']!r}" for o in stuck]
    for pk, pid in deployments.items():
        body = stack.get(f"/api/v1/deployments/{pk}/")
        if body["status"] != body["desired_state"]:
            outcome.problems.append(
                f"deployment {body['name']} {body['status']}: {body.get('reason_display')}"
            )
        now_pid = ((body.get("runtime") or {}).get("nodes") or {}).get(node, {}).get("pid")
        outcome.details.setdefault("engine_pids", {})[body["name"]] = now_pid
        if pid is not None and now_pid != pid:
            outcome.problems.append(f"deployment {body['name']}: engine {pid} not adopted (now {now_pid})")
    if watch:
        holders = watch.sample()
        if watch.worst > 1:
            outcome.double_runs += 1
            outcome.problems.append(f"{watch.worst} live engines held one NPU at once")
        mine = {pid for pid in (outcome.details.get("engine_pids") or {}).values() if pid}
        strays = [h["pid"] for h in holders if h["pid"] not in mine]
        if strays:
            outcome.problems.append(f"engines {strays} hold NPUs but no deployment records them")


def delete_and_release(stack: FaultStack, node: str, outcome: Outcome, watch: HolderWatch, pks) -> None:
    """DELETE each deployment; it must go away and its engine must free the NPUs on the host."""
    for pk in pks:
        stack.call("DELETE", f"/api/v1/deployments/{pk}/")
    try:
        wait_until(
            lambda: all(stack.call("GET", f"/api/v1/deployments/{pk}/").status_code == 404 for pk in pks),
            SETTLE_S,
            "deleted deployments to go away",
            0.5,
        )
        wait_until(lambda: not watch.live(), 30, "the NPUs to be free on the host", 0.5)
    except AssertionError as error:
        outcome.problems.append(str(error))


def audit_all(stack: FaultStack, node: str, outcome: Outcome) -> None:
    for operation in operations(stack, node):
        audit_events(stack, operation, outcome)
    outcome.details["operations"] = sorted(f"{o['kind']}:{o['status']}" for o in operations(stack, node))


def package_runs(root) -> list[dict]:
    """The sim host's record of its package runs (workers/sim/installers/script.py's RUN_RECORD), one dict
    per run: package, action, pid, start, end (None: it never ended), result."""
    import json
    from pathlib import Path

    from workers.sim.installers.script import RUN_RECORD

    path = Path(root) / RUN_RECORD
    runs: dict[int, dict] = {}
    for line in path.read_text().splitlines() if path.exists() else []:
        entry = json.loads(line)
        if entry["event"] == "start":
            runs[entry["pid"]] = {**entry, "start": entry["time"], "end": None, "result": None}
        elif entry["pid"] in runs:
            runs[entry["pid"]].update(end=entry["time"], result=entry.get("result"))
    return sorted(runs.values(), key=lambda run: run["start"])


def audit_package_runs(root, outcome: Outcome) -> None:
    """Two package runs at once on one host (two installs at the same time) are a double run, and so is
    one package installed twice by what should have been one install."""
    runs = package_runs(root)
    outcome.details["package_runs"] = [f"{r['kind']} {r['action']} {r['result']}" for r in runs]
    for earlier, later in zip(runs, runs[1:], strict=False):
        if earlier["end"] is None or later["start"] < earlier["end"]:
            outcome.double_runs += 1
            outcome.problems.append(f"{later['package']} ran while {earlier['package']} still did")
    installed = defaultdict(int)
    for run in runs:
        if run["result"] == "ok":
            installed[(run["package"], run["action"])] += 1
    for (package, action), times in installed.items():
        if times > 1:
            outcome.double_runs += 1
            outcome.problems.append(f"{package} {action} ran {times} times on the host")
