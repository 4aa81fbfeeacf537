"""agent-frozen-past-deadline: the agent hangs (SIGSTOP: a paused VM, a host stuck in the kernel) with an
install in hand; the panel fails the install at its deadline (the node went silent for good), the admin
starts the install again over REST, and only then does the agent resume, holding every delivery sent to it
meanwhile. Those must run nothing (the agent asks the panel before it runs, workers/asking.py: their
operations ended), and only one install may run on the host (the sim host's record of its package runs,
checks.package_runs).

The admin's retry reaches a node that is offline for good, so the panel fails it too at its next sweep,
before the agent resumes (it is the second delivery in the agent's hands then); once the node is back, the
admin retries again and that install must run, alone.
"""

from __future__ import annotations

import contextlib
import json
import time

from tests.faults.checks import TERMINAL, Outcome, audit_package_runs, events_of, settle
from tests.faults.stack import STACK_ENV, FaultStack, StackError, wait_until

# The install is sent when the agent is already frozen: its heartbeats stop, the node is offline after three
# missed ones (15 s) and its open operations fail PANEL_OPERATION_OFFLINE_GRACE_S later (STACK_ENV), while
# their deliveries still count (they expire with the pickup deadline, PANEL_OPERATION_PICKUP_S).
DEADLINE_WAIT_S = 75
ENDED_ON_THE_PANEL = "ended on the panel"  # what the agent's lease says of a delivery it was told not to run
# A delivery older than this when the agent resumes has expired (Celery's `expires`): the agent drops it
# unrun without asking. On a loaded machine the panel's deadline can come that late.
PICKUP_S = float(STACK_ENV["PANEL_OPERATION_PICKUP_S"])


def start_install(stack: FaultStack, node: str, profile: str) -> str:
    response = stack.call("POST", f"/api/v1/node-stacks/{node}/install/", json={"profile": profile})
    if response.status_code != 202:
        raise StackError(f"install answered {response.status_code}: {response.text[:300]}")
    return response.json()["id"]


def lease_record(stack: FaultStack, node: str, operation_id: str) -> dict:
    """The agent's own record of an operation's deliveries on the host (workers.leases)."""
    path = stack.sim_roots[node] / "var/lib/ascend-panel/operations" / f"{operation_id}.json"
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def frozen_past_deadline(stack: FaultStack, node: str, agent_name: str, outcome: Outcome, profile: str):
    def ended(operation_id: str, timeout: float, what: str) -> dict:
        return wait_until(
            lambda: (body := stack.get(f"/api/v1/operations/{operation_id}/"))["status"] in TERMINAL and body,
            timeout,
            what,
            0.5,
        )

    stack.freeze(agent_name)
    sent_at = {}
    try:
        first = start_install(stack, node, profile)
        sent_at[first] = time.monotonic()
        failed = ended(first, DEADLINE_WAIT_S, "the panel to fail the frozen agent's install at its deadline")
        outcome.details["frozen_install"] = f"{failed['status']}: {failed['error']}"
        retries = [start_install(stack, node, profile)]  # the admin's retry, the agent still frozen
        with contextlib.suppress(AssertionError):
            ended(retries[0], 10, "the retry to a node offline for good to fail")
    finally:
        stack.thaw(agent_name)
    thawed_at = time.monotonic()
    in_hand = [first, *(r for r in retries if stack.get(f"/api/v1/operations/{r}/")["status"] == "failed")]
    # The resumed agent takes each up, says it runs, asks, and is told the operation ended.
    records = [_finished_record(stack, node, operation_id) for operation_id in in_hand]
    outcome.details["frozen_deliveries"] = [r.get("finished") or "never taken up" for r in records]
    # Proved once a delivery the frozen agent held reached the ask and was told its operation ended. On a
    # loaded machine the first can expire before the thaw (dropped unrun, no ask): the held retry proves it.
    outcome.hit_mid = any(record.get("finished") == ENDED_ON_THE_PANEL for record in records)
    if len(in_hand) > 1:  # the retry failed too: once the node is back, the admin retries again
        wait_until(lambda: stack.node(node).get("status") == "online", 60, "the node to be online again", 1)
        retries.append(start_install(stack, node, profile))
    settle(stack, node, outcome, thawed_at)
    expired = {op for op, at in sent_at.items() if thawed_at - at > PICKUP_S}
    audit_frozen(stack, node, outcome, in_hand, retries[-1], expired)


def _finished_record(stack: FaultStack, node: str, operation_id: str) -> dict:
    try:
        return wait_until(
            lambda: (r := lease_record(stack, node, operation_id)).get("finished") and r,
            30,
            "the resumed agent to take up a delivery it held",
            0.5,
        )
    except AssertionError:
        return lease_record(stack, node, operation_id)


def audit_frozen(
    stack: FaultStack, node: str, outcome: Outcome, in_hand: list[str], last: str, expired: set[str]
) -> None:
    for operation_id in in_hand:
        label = f"install {operation_id[:8]}"
        body = stack.get(f"/api/v1/operations/{operation_id}/")
        if body["status"] != "failed":
            outcome.problems.append(f"{label} came back {body['status']} after the agent resumed")
        # What the agent sent for it: at most "running" (said before it asked), no step, no log line.
        sent = [e for e in events_of(stack, operation_id) if e.get("agent_seq") is not None]
        ran = [e for e in sent if not (e["kind"] == "state" and e["payload"].get("state") == "running")]
        if ran:
            outcome.double_runs += 1
            kinds = sorted({e["kind"] for e in ran})
            outcome.problems.append(f"{label} ran after the agent resumed: {len(ran)} events ({kinds})")
        finished = lease_record(stack, node, operation_id).get("finished")
        if finished is None and operation_id in expired:
            outcome.details.setdefault("expired_before_resume", []).append(label)  # dropped unrun, no ask
        elif finished != ENDED_ON_THE_PANEL:
            outcome.problems.append(
                f"{label}: the resumed agent's lease says {finished!r}, not {ENDED_ON_THE_PANEL!r} "
                "(it never got the panel's answer)"
            )
    final = stack.get(f"/api/v1/operations/{last}/")
    outcome.details["last_install"] = final["status"]
    if final["status"] != "succeeded":
        outcome.problems.append(f"the admin's last install ended {final['status']}: {final['error']}")
    stack_row = stack.get(f"/api/v1/node-stacks/{node}/")
    outcome.details["stack_status"] = stack_row.get("status")
    if stack_row.get("status") != "installed":
        outcome.problems.append(f"the node's stack says {stack_row.get('status')}, not installed")
    audit_package_runs(stack.sim_roots[node], outcome)
    if not outcome.details["package_runs"]:
        outcome.problems.append("no package ran on the host: the last install installed nothing")
