"""The fault scenarios, shared by the pytest tier (tests/faults) and bench/faults.py.

Each scenario gets a node of its own (a fresh sim host with its own agent) on one shared stack, starts work
over REST, SIGKILLs one real process at a chosen moment, restarts it as systemd would (an engine is not
restarted by hand: that is the reconcile loop's job), then checks what tests/faults/checks.py checks. A
scenario leaves the shared stack healthy: the process it killed is running again. "broker" is the fleet's
RabbitMQ (the stack's own node), "redis" the panel's own Redis; agent-frozen-past-deadline SIGSTOPs the agent
instead of killing it (tests/faults/frozen_scenario.py).
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from tests.faults.checks import (
    SETTLE_S,
    TERMINAL,
    HolderWatch,
    Outcome,
    audit_all,
    delete_and_release,
    settle,
)
from tests.faults.stack import FaultStack, StackError, wait_until

INSTALL_PROFILE = "0.11.0"  # CANN 8.3.RC2: toolkit, ops, NNAL and a venv go onto the sim A2


@dataclass(frozen=True)
class Scenario:
    name: str
    target: str  # agent, a panel process or its group (stack.REPLICAS), redis (the panel's), broker, engine
    phase: str  # install, deploy, serving, delete, create, copy, frozen
    doc: str


SCENARIOS = [
    Scenario("agent-mid-install", "agent", "install", "agent killed while an install runs"),
    Scenario(
        "worker-mid-install", "panel-worker", "install", "both panel workers killed while an install runs"
    ),
    Scenario("redis-mid-install", "redis", "install", "the panel's Redis killed (AOF kept) mid-install"),
    Scenario("agent-mid-deploy", "agent", "deploy", "agent killed while the launch runs"),
    Scenario(
        "worker-mid-deploy", "panel-worker", "deploy", "both panel workers killed while the launch runs"
    ),
    Scenario("redis-mid-deploy", "redis", "deploy", "the panel's Redis killed while the launch runs"),
    Scenario("broker-mid-deploy", "broker", "deploy", "RabbitMQ killed (back from its data) mid-launch"),
    Scenario("web-mid-create", "web", "create", "both web servers killed mid-POST /deployments/, retried"),
    Scenario("agent-while-serving", "agent", "serving", "agent killed under a running engine: adopted"),
    Scenario("worker-while-serving", "panel-worker", "serving", "both panel workers killed under an engine"),
    Scenario("redis-while-serving", "redis", "serving", "the panel's Redis killed under a running engine"),
    Scenario("engine-killed", "engine", "serving", "the engine itself killed: restarted by reconcile"),
    Scenario("agent-mid-delete", "agent", "delete", "agent killed while the delete's stop runs"),
    Scenario("agent-mid-copy", "agent", "copy", "source agent killed while rsync copies a model"),
    Scenario(
        "agent-frozen-past-deadline",
        "agent",
        "frozen",
        "agent SIGSTOPped with an install in hand until the panel failed it and it was retried",
    ),
]
# The panel on two of everything (tests/faults/replica_scenarios.py): one replica dies, the other carries on.
SCENARIOS += [
    Scenario(
        "worker-replica-mid-install",
        "panel-worker-1",
        "install",
        "one of two panel workers killed mid-ingest",
    ),
    Scenario(
        "worker-replica-mid-deploy", "panel-worker-1", "deploy", "one of two panel workers killed mid-launch"
    ),
    Scenario(
        "web-replica-with-viewers", "web replica", "viewers", "the busier web server killed under dashboards"
    ),
    Scenario(
        "beat-leader", "beat leader", "beat", "the ticking beat killed: the standby leads, sweeps go on"
    ),
]
# Elastic serving (tests/faults/elastic_scenarios.py): autoscaling and sleep under a kill.
SCENARIOS += [
    Scenario(
        "worker-mid-scale-up", "panel-worker", "scale-up", "both panel workers killed mid autoscale step"
    ),
    Scenario("engine-dies-asleep", "engine", "asleep", "the engine killed asleep: noticed, restarted"),
]
# NPU failover (tests/faults/failover_scenarios.py): a sick NPU under streamed load, its replica moved.
SCENARIOS += [
    Scenario(
        "npu-critical-failover", "npu", "failover", "an NPU goes Critical under load: its replica moves"
    ),
    Scenario(
        "node-power-off-failover",
        "node",
        "power-off",
        "a node loses power under load: its replica starts on another node, nothing moves back",
    ),
    Scenario(
        "node-cut-off-failover",
        "node",
        "cut-off",
        "a node is cut off under load: its replica moves, its old engine is stopped when it returns",
    ),
]
BY_NAME = {s.name: s for s in SCENARIOS}


def node_for(scenario: Scenario) -> str:
    return f"f-{scenario.name}"


def agent(node: str) -> str:
    return f"agent {node}"


def kill_and_restart(
    stack: FaultStack,
    scenario: Scenario,
    node: str,
    engine_pid: int | None = None,
    while_down: Callable[[], None] | None = None,
) -> float:
    """SIGKILL the scenario's target; restart it unless it is the engine. Returns when the kill happened."""
    if scenario.target == "engine":
        if not engine_pid:
            raise StackError("no engine pid to kill")
        os.kill(engine_pid, signal.SIGKILL)
        return time.monotonic()
    name = agent(node) if scenario.target == "agent" else scenario.target
    return kill_then_restart(stack, name, while_down)


def kill_then_restart(stack: FaultStack, name: str, while_down: Callable[[], None] | None = None) -> float:
    """SIGKILL the program (or replica group) `name` and start it again a moment later, as systemd would.
    `while_down` runs right after the kill (what the kill met, read before the restart). Returns when the
    kill happened (time.monotonic)."""
    stack.kill(name)
    killed_at = time.monotonic()
    if while_down is not None:
        while_down()
    time.sleep(1.0)  # down for a moment, as a crashed unit is before systemd's restart
    stack.restart(name)
    return killed_at


def operation(stack: FaultStack, operation_id: str) -> dict:
    return stack.get(f"/api/v1/operations/{operation_id}/")


def wait_running(stack: FaultStack, operation_id: str, outcome: Outcome, progress_above: float = 0) -> None:
    """Until the operation runs (and has passed `progress_above` percent); hit_mid says whether the kill
    that follows lands before it ended."""

    def under_way():
        body = operation(stack, operation_id)
        return body["status"] in TERMINAL or (
            body["status"] == "running" and body["progress"] > progress_above
        )

    wait_until(under_way, 60, f"operation {operation_id} to run")
    outcome.hit_mid = operation(stack, operation_id)["status"] not in TERMINAL


def deployment_body(stack: FaultStack, node: str, name: str) -> dict:
    return {
        "name": name,
        "model": stack.model_pk,
        "path": str(stack.model_path),
        "nodes": [{"node": node, "npus": [0]}],
    }


def create_deployment(stack: FaultStack, node: str, name: str, key: str | None = None) -> dict:
    headers = {"Idempotency-Key": key or uuid.uuid4().hex}
    response = stack.call(
        "POST", "/api/v1/deployments/", json=deployment_body(stack, node, name), headers=headers
    )
    if response.status_code != 201:
        raise StackError(f"POST /deployments/ answered {response.status_code}: {response.text[:300]}")
    return response.json()


def engine_pid(stack: FaultStack, pk: int, node: str) -> int | None:
    body = stack.get(f"/api/v1/deployments/{pk}/")
    return ((body.get("runtime") or {}).get("nodes") or {}).get(node, {}).get("pid")


def wait_deployment(stack: FaultStack, pk: int, status: str) -> dict:
    return wait_until(
        lambda: (b := stack.get(f"/api/v1/deployments/{pk}/"))["status"] == status and b,
        SETTLE_S,
        f"deployment {pk} {status}",
        0.5,
    )


# -- the phases ------------------------------------------------------------------------------------------
def during_install(stack: FaultStack, scenario: Scenario, node: str, outcome: Outcome) -> None:
    response = stack.call("POST", f"/api/v1/node-stacks/{node}/install/", json={"profile": INSTALL_PROFILE})
    if response.status_code != 202:
        raise StackError(f"install answered {response.status_code}: {response.text[:300]}")
    operation_id = response.json()["id"]
    wait_running(stack, operation_id, outcome, progress_above=5)
    killed_at = kill_and_restart(stack, scenario, node)
    settle(stack, node, outcome, killed_at)
    stack_row = stack.get(f"/api/v1/node-stacks/{node}/")
    install = operation(stack, operation_id)
    outcome.details["install"] = install["status"]
    outcome.details["stack_status"] = stack_row.get("status")
    # The fault was transient and the process is back: the install must end as it would have without it.
    if install["status"] != "succeeded":
        outcome.problems.append(f"install ended {install['status']}: {install['error']}")
    if stack_row.get("status") != "installed":
        outcome.problems.append(f"the node's stack says {stack_row.get('status')}, not installed")


def during_deploy(stack: FaultStack, scenario: Scenario, node: str, outcome: Outcome) -> None:
    watch = HolderWatch(stack.sim_roots[node])
    created = create_deployment(stack, node, f"{scenario.name}-d")
    wait_running(stack, created["operation"], outcome)
    killed_at = kill_and_restart(stack, scenario, node)
    alive = [h["pid"] for h in watch.sample()]
    # An engine that started before the kill and still lives must be the one adopted.
    settle(stack, node, outcome, killed_at, {created["id"]: alive[0] if alive else None}, watch)
    delete_and_release(stack, node, outcome, watch, [created["id"]])


def while_serving(stack: FaultStack, scenario: Scenario, node: str, outcome: Outcome) -> None:
    watch = HolderWatch(stack.sim_roots[node])
    created = create_deployment(stack, node, f"{scenario.name}-d")
    wait_deployment(stack, created["id"], "running")
    pid = engine_pid(stack, created["id"], node)
    outcome.hit_mid = True
    killed_at = kill_and_restart(stack, scenario, node, engine_pid=pid)
    if scenario.target == "engine":
        # A new engine, started by the reconcile loop once a probe finds the old one dead.
        wait_until(
            lambda: engine_pid(stack, created["id"], node) not in (None, pid), SETTLE_S, "a new engine"
        )
        settle(stack, node, outcome, killed_at, {created["id"]: None}, watch)
    else:
        time.sleep(3)  # a few probe rounds with the restarted process
        settle(stack, node, outcome, killed_at, {created["id"]: pid}, watch)
    delete_and_release(stack, node, outcome, watch, [created["id"]])


def during_delete(stack: FaultStack, scenario: Scenario, node: str, outcome: Outcome) -> None:
    watch = HolderWatch(stack.sim_roots[node])
    created = create_deployment(stack, node, f"{scenario.name}-d")
    wait_deployment(stack, created["id"], "running")
    stack.call("DELETE", f"/api/v1/deployments/{created['id']}/")
    stops = wait_until(
        lambda: [o for o in stack.all_pages("/api/v1/operations/", node=node, kind="stop")],
        30,
        "the delete's stop operation",
    )
    # The stop of a sim engine takes a moment only: kill as soon as it exists, before it has ended.
    outcome.hit_mid = stops[0]["status"] not in TERMINAL
    killed_at = kill_and_restart(stack, scenario, node)
    settle(stack, node, outcome, killed_at, {}, watch)
    delete_and_release(stack, node, outcome, watch, [created["id"]])


def during_create(stack: FaultStack, scenario: Scenario, node: str, outcome: Outcome) -> None:
    """POST in flight when the web process dies; the script retries with the same Idempotency-Key."""
    watch = HolderWatch(stack.sim_roots[node])
    name, key = f"{scenario.name}-d", uuid.uuid4().hex
    body = deployment_body(stack, node, name)
    first: dict = {}

    def post():
        with contextlib.suppress(Exception):
            first["response"] = stack.api.post(
                "/api/v1/deployments/", json=body, headers={"Idempotency-Key": key}
            )

    thread = threading.Thread(target=post)
    thread.start()
    # The POST (validation, placement, rows, the launch's publish) takes some tens of ms on an idle machine:
    # kill well within it (50 ms sometimes landed after the answer).
    time.sleep(0.015)
    outcome.hit_mid = thread.is_alive()
    killed_at = kill_and_restart(stack, scenario, node)
    thread.join(30)

    def retried():
        response = stack.call("POST", "/api/v1/deployments/", json=body, headers={"Idempotency-Key": key})
        return response if response.status_code != 409 else None

    try:
        # The killed request's claim on the key lasts a minute (panel.core.rest.idempotency.CLAIM_TTL_S).
        answer = wait_until(retried, 90, "the retry with the same Idempotency-Key to be answered", 2)
        if answer.status_code != 201:
            outcome.problems.append(f"the retry answered {answer.status_code}: {answer.text[:200]}")
    except AssertionError:
        outcome.problems.append(
            "the Idempotency-Key of the killed request stays 'still being processed' (409)"
        )
    same_name = [d for d in stack.all_pages("/api/v1/deployments/") if d["name"] == name]
    if len(same_name) > 1:
        outcome.double_runs += 1
        outcome.problems.append(f"{len(same_name)} deployments named {name} after the retry")
    settle(stack, node, outcome, killed_at, {d["id"]: None for d in same_name}, watch)
    delete_and_release(stack, node, outcome, watch, [d["id"] for d in same_name])


def during_copy(stack: FaultStack, scenario: Scenario, node: str, outcome: Outcome) -> None:
    from tests.faults.copy_scenario import copied_bytes, copy_target, model_bytes, start_copy

    with copy_target(stack) as server:
        stack.stop_program(agent(node))  # the agent logs in to the target with the sshd's client key
        # Capped at 16 MiB/s (about 19 s for the 300 MB): over loopback the copy would end within rsync's
        # first progress redraw, before any kill could land.
        limit = {"ASCEND_PANEL_COPY_BWLIMIT_KIB_S": "16384"}
        stack.start_agent(node, {"ASCEND_PANEL_SSH_KEY": str(server.workdir / "client_key"), **limit})
        operation_id = start_copy(stack, node, server)
        total = model_bytes(stack, node)
        # Mid-copy is judged where the copy happens, the bytes rsync has written on the (loopback) target,
        # not by the panel's view of the operation: that view is the agent's progress events after rsync's
        # redraw, the spool, the broker and the ingest, and on a loaded machine it reached the panel only
        # after a 6 s copy had ended, so the kill that waited for it met a finished copy.
        wait_until(
            lambda: copied_bytes(stack, node) > 0 or operation(stack, operation_id)["status"] in TERMINAL,
            60,
            f"rsync of operation {operation_id} to write on the target",
        )
        at_kill: dict[str, int] = {}
        killed_at = kill_and_restart(
            stack, scenario, node, while_down=lambda: at_kill.update(copied=copied_bytes(stack, node))
        )
        # Read after the kill returned (the agent is dead): fewer bytes than the model means rsync, which the
        # agent ran, had not finished when the kill landed.
        outcome.hit_mid = 0 < at_kill["copied"] < total
        outcome.details["copied_at_kill"] = f"{at_kill['copied']} of {total} bytes"
        settle(stack, node, outcome, killed_at)
        outcome.details["copy"] = operation(stack, operation_id)["status"]


def frozen(stack: FaultStack, scenario: Scenario, node: str, outcome: Outcome) -> None:
    from tests.faults.frozen_scenario import frozen_past_deadline

    frozen_past_deadline(stack, node, agent(node), outcome, INSTALL_PROFILE)


def replica_viewers(stack: FaultStack, scenario: Scenario, node: str, outcome: Outcome) -> None:
    from tests.faults.replica_scenarios import viewers

    viewers(stack, scenario, node, outcome)


def replica_beat(stack: FaultStack, scenario: Scenario, node: str, outcome: Outcome) -> None:
    from tests.faults.replica_scenarios import beat_leader

    beat_leader(stack, scenario, node, outcome)


def elastic_scale_up(stack: FaultStack, scenario: Scenario, node: str, outcome: Outcome) -> None:
    from tests.faults.elastic_scenarios import worker_mid_scale_up

    worker_mid_scale_up(stack, scenario, node, outcome)


def elastic_asleep(stack: FaultStack, scenario: Scenario, node: str, outcome: Outcome) -> None:
    from tests.faults.elastic_scenarios import engine_dies_asleep

    engine_dies_asleep(stack, scenario, node, outcome)


def npu_failover(stack: FaultStack, scenario: Scenario, node: str, outcome: Outcome) -> None:
    from tests.faults.failover_scenarios import npu_critical

    npu_critical(stack, scenario, node, outcome)


def power_off_failover(stack: FaultStack, scenario: Scenario, node: str, outcome: Outcome) -> None:
    from tests.faults.failover_scenarios import node_power_off

    node_power_off(stack, scenario, node, outcome)


def cut_off_failover(stack: FaultStack, scenario: Scenario, node: str, outcome: Outcome) -> None:
    from tests.faults.failover_scenarios import node_cut_off

    node_cut_off(stack, scenario, node, outcome)


PHASES = {
    "install": during_install,
    "deploy": during_deploy,
    "serving": while_serving,
    "delete": during_delete,
    "create": during_create,
    "copy": during_copy,
    "frozen": frozen,
    "viewers": replica_viewers,
    "beat": replica_beat,
    "scale-up": elastic_scale_up,
    "asleep": elastic_asleep,
    "failover": npu_failover,
    "power-off": power_off_failover,
    "cut-off": cut_off_failover,
}


def run_scenario(stack: FaultStack, scenario: Scenario) -> Outcome:
    """Run one scenario on its own node; the node's agent is stopped afterwards (the stack stays up)."""
    node = node_for(scenario)
    outcome = Outcome(scenario.name, scenario.target, scenario.phase)
    begun = time.monotonic()
    stack.start_agent(node)
    try:
        PHASES[scenario.phase](stack, scenario, node, outcome)
        audit_all(stack, node, outcome)
    finally:
        # Restarted by the stack's systemd stand-in, like any crash on a host; a finding, not a failure.
        outcome.details["crashed"] = [name for at, name in stack.crashes if at >= begun]
        clean_up(stack, node)
    return outcome


def clean_up(stack: FaultStack, node: str) -> None:
    """Whatever a failed scenario left must not disturb the next one (an engine holding the port range):
    delete its deployments, stop its agent, kill the engines its host still records."""
    from tests.deployment_helpers import kill_recorded_engines

    left = [d for d in stack.all_pages("/api/v1/deployments/") if node in str(d.get("nodes"))]
    for deployment in left:
        stack.call("DELETE", f"/api/v1/deployments/{deployment['id']}/")
    with contextlib.suppress(AssertionError):
        wait_until(
            lambda: not any(node in str(d.get("nodes")) for d in stack.all_pages("/api/v1/deployments/")),
            20,
            "",
        )
    stack.stop_program(agent(node))
    kill_recorded_engines(stack.sim_roots[node])


def all_nodes() -> list[str]:
    # node-power-off-failover moves its replica to a second node (tests/faults/failover_scenarios.py).
    return [node_for(s) for s in SCENARIOS] + ["f-power-spare"]
