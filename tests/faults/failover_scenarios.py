"""Fault scenarios of NPU failover (issue 37; docs/serving-plane.md §6), on the shared stack, with
bench/failover.py's assertions.

- npu-critical-failover: two deployments serve one model name through the gateway, each on an NPU of the
  scenario's node, under streamed requests back to back. The NPU under the first goes Critical (the sim host's
  own fault: npu-smi prints it). Capacity must be restored within RESTORE_LIMIT_S (a row of that deployment
  running on another NPU), no request that had not started may fail, and every stream cut mid-way must end
  with an OpenAI error event. The NPU is marked healthy again by an admin afterwards, as the health policy
  holds a failed NPU until someone does.

- node-power-off-failover: the same two deployments on two nodes, the first on the scenario's node, the
  second on SPARE_NODE. The scenario's node loses power (`python -m workers.sim fault --power-off`, workers/
  sim/power.py: its engines die at once, its agent goes silent). The node goes offline after three missed
  heartbeats, the gateway leaves its instance out, and past the failover's bound the first deployment is
  started again on SPARE_NODE: the same assertions, within RESTORE_LIMIT_S of the power cut. Then the power
  comes back and the agent boots (restarted as systemd would at boot); once the node is online again, nothing
  may move back to it for HYSTERESIS_S (one `replica_moved` decision in all).

- node-cut-off-failover: the same, but the node is only cut off (`fault --cut-off`: its agent stopped, its
  engine left running, as a host whose network went). The move is the same; when the agent goes on
  (`--reconnect`) and the node is online again, the old engine there must be stopped by the panel (fence:
  panel/deployments/failover/fence.py, an `engine_fenced` event) within FENCE_S, the replica serving on
  SPARE_NODE untouched, and nothing may move back.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time

from bench.failover import Clients
from panel.run import BASE_DIR
from tests.deployment_helpers import kill_recorded_engines
from tests.faults.checks import SETTLE_S, Outcome
from tests.faults.scenarios import Scenario, agent, wait_deployment
from tests.faults.stack import FaultStack, StackError, wait_until
from workers.engine.running import runtime

MODEL = "tiny-faults"  # the model tests/faults/stack.py registers
RESTORE_LIMIT_S = 60.0  # the target: capacity restored within a minute of the fault
SPARE_NODE = "f-power-spare"  # where node-power-off-failover moves its replica (scenarios.all_nodes)
HYSTERESIS_S = 15.0  # the node back online this long, with reconcile ticks every second: nothing moves back
CLIENTS = 8
FENCE_S = 30.0  # the node online again: its old engine stopped within this
TOKENS = 30


def _put(stack: FaultStack, name: str, node: str, served: str) -> None:
    spec = {
        "model": MODEL,
        "path": str(stack.model_path),
        "placement": {"node": node, "npus": 1},
        "engine": {"max_model_len": 2048, "served_model_name": served},
    }
    answer = stack.call("PUT", f"/api/v1/deployments/{name}/", json=spec)
    if answer.status_code not in (200, 201):
        raise StackError(f"PUT /deployments/{name}/ answered {answer.status_code}: {answer.text[:300]}")


def _rows(stack: FaultStack, name: str) -> list[dict]:
    """The deployment and its replica rows (a surge included)."""
    body = stack.get(f"/api/v1/deployments/{name}/")
    replicas = [stack.get(f"/api/v1/deployments/{r['name']}/") for r in body.get("replicas") or []]
    return [body, *replicas]


def _npus(row: dict) -> set[int]:
    return {npu["npu_id"] for npu in row.get("npus") or []}


def _restored(stack: FaultStack, name: str, sick: int) -> bool:
    return any(r["status"] == "running" and _npus(r) and sick not in _npus(r) for r in _rows(stack, name))


def _settled(stack: FaultStack, name: str) -> bool:
    body = stack.get(f"/api/v1/deployments/{name}/")
    rollout = body.get("rollout") or {}
    live = [r for r in body.get("replicas") or [] if r.get("desired_state") != "deleted"]
    return body["status"] == "running" and rollout.get("status") != "running" and not live


def _sim_fault(stack: FaultStack, node: str, *flags: str) -> None:
    root = str(stack.sim_roots[node])
    command = [sys.executable, "-m", "workers.sim", "fault", "--root", root, *flags]
    subprocess.run(command, cwd=BASE_DIR, check=True, capture_output=True, timeout=60)


def npu_critical(stack: FaultStack, scenario: Scenario, node: str, outcome: Outcome) -> None:
    # The health policy reads the agent's samples: the stack's agents sample nothing unless told to.
    stack.stop_program(agent(node))
    stack.start_agent(node, {"ASCEND_PANEL_METRICS_S": "1"})
    served = f"{scenario.name}-m"
    sick_name, other_name = f"{scenario.name}-a", f"{scenario.name}-b"
    for name in (sick_name, other_name):
        _put(stack, name, node, served)
        wait_deployment(stack, name, "running")
    sick = sorted(_npus(stack.get(f"/api/v1/deployments/{sick_name}/")))[0]
    headers = {"Authorization": f"Bearer {stack.token}"}
    clients = Clients(f"http://127.0.0.1:{stack.web_port}", headers, CLIENTS, TOKENS, model=served)
    clients.start()
    try:
        wait_until(lambda: clients.counts["whole"] >= CLIENTS, 60, "the clients' first answers", 0.5)
        started = time.monotonic()
        _sim_fault(stack, node, "--npu", str(sick), "--health", "Critical")
        outcome.hit_mid = True  # the fault lands under load: requests are in flight on the sick replica
        try:
            wait_until(
                lambda: _restored(stack, sick_name, sick), 2 * RESTORE_LIMIT_S, "capacity restored", 0.5
            )
            outcome.recovery_s = round(time.monotonic() - started, 1)
            if outcome.recovery_s > RESTORE_LIMIT_S:
                outcome.problems.append(
                    f"capacity restored in {outcome.recovery_s} s, over {RESTORE_LIMIT_S}"
                )
        except AssertionError as error:
            outcome.problems.append(str(error))
        _sim_fault(stack, node, "--clear")
        try:
            wait_until(lambda: _settled(stack, sick_name), SETTLE_S, f"{sick_name} settled off NPU {sick}", 1)
        except AssertionError as error:
            outcome.problems.append(str(error))
        time.sleep(3)  # requests in flight on the new replica end under load too
    finally:
        clients.stopping.set()
        clients.join(150)
    _judge_clients(clients, outcome)
    outcome.details.update(npu=sick)
    if sick in _npus(stack.get(f"/api/v1/deployments/{sick_name}/")):
        outcome.problems.append(f"{sick_name} still holds the failed NPU {sick}")
    _mark_healthy(stack, node, sick, outcome)


def _mark_healthy(stack: FaultStack, node: str, npu_id: int, outcome: Outcome) -> None:
    """An admin brings the NPU back (the policy keeps it failed until someone does), so the node is whole."""
    body = {"npu": f"{npu_id}/0", "state": "ok", "note": "fault tier: the sim fault is cleared"}
    answer = stack.call("POST", f"/api/v1/nodes/{stack.node(node)['id']}/npu-health/", json=body)
    if answer.status_code not in (200, 201):
        outcome.problems.append(
            f"marking NPU {npu_id} healthy answered {answer.status_code}: {answer.text[:200]}"
        )


def _judge_clients(clients: Clients, outcome: Outcome) -> None:
    """The issue's request targets: no request that had not started failed, every cut stream ended with an
    error event a client can read."""
    counts = clients.counts
    outcome.details.update(answers=counts, cut_causes=clients.causes, samples=clients.samples[:5])
    if counts["unstarted"]:
        outcome.problems.append(f"{counts['unstarted']} requests failed before their first byte")
    if counts["cut"]:
        outcome.problems.append(f"{counts['cut']} streams cut mid-way without an error event")


def _nodes_of(row: dict) -> set[str]:
    return {npu["node"] for npu in row.get("npus") or []}


def _moved_to(stack: FaultStack, name: str, gone: str) -> bool:
    return any(r["status"] == "running" and _nodes_of(r) - {gone} for r in _rows(stack, name))


def _moves(stack: FaultStack, name: str) -> list[dict]:
    body = stack.get(f"/api/v1/deployments/{name}/events/")
    return [event for event in body.get("results") or [] if event.get("kind") == "replica_moved"]


COPIES = """
import os
from panel.catalog.models import Model, ModelArtifact
from panel.nodes.models import Node
model = Model.objects.get(name=os.environ["FAULTS_MODEL"])
for name in os.environ["FAULTS_NODES"].split():
    node, path = Node.objects.get(name=name), os.environ["FAULTS_PATH"]
    ModelArtifact.objects.update_or_create(node=node, path=path, defaults={"model": model, "ready": True})
"""


def _copies_on(stack: FaultStack, *nodes: str) -> None:
    """The model's folder is on every sim host (one machine's disk): registered as a ready copy on `nodes`,
    as a copy made earlier would be, so a move to another node finds one there (placement needs it)."""
    env = {"FAULTS_MODEL": MODEL, "FAULTS_NODES": " ".join(nodes), "FAULTS_PATH": str(stack.model_path)}
    with open(stack.dir / "logs" / "setup.log", "ab") as log:
        subprocess.run(
            [sys.executable, "manage.py", "shell", "-c", COPIES],
            cwd=BASE_DIR,
            env={**stack.env, **env},
            check=True,
            stdout=log,
            stderr=log,
            timeout=120,
        )


def node_power_off(stack: FaultStack, scenario: Scenario, node: str, outcome: Outcome) -> None:
    _node_silent(stack, scenario, node, outcome, cut_off=False)


def node_cut_off(stack: FaultStack, scenario: Scenario, node: str, outcome: Outcome) -> None:
    _node_silent(stack, scenario, node, outcome, cut_off=True)


def _node_silent(stack: FaultStack, scenario: Scenario, node: str, outcome: Outcome, cut_off: bool) -> None:
    """The node goes silent under load (its power cut, or its agent cut off): the move, then its return."""
    stack.start_agent(SPARE_NODE)
    _copies_on(stack, node, SPARE_NODE)
    served = f"{scenario.name}-m"
    sick_name, other_name = f"{scenario.name}-a", f"{scenario.name}-b"
    try:
        # The other one first: its folder registered on the spare node is the copy the move finds there.
        for name, where in ((other_name, SPARE_NODE), (sick_name, node)):
            _put(stack, name, where, served)
            wait_deployment(stack, name, "running")
        headers = {"Authorization": f"Bearer {stack.token}"}
        clients = Clients(f"http://127.0.0.1:{stack.web_port}", headers, CLIENTS, TOKENS, model=served)
        clients.start()
        try:
            wait_until(lambda: clients.counts["whole"] >= CLIENTS, 60, "the clients' first answers", 0.5)
            started = time.monotonic()
            stack.held.add(agent(node))  # the power-on boots it, not the stack's restart-on-exit
            _sim_fault(stack, node, "--cut-off" if cut_off else "--power-off")
            outcome.hit_mid = True  # streams are in flight on the node's engine when the power goes
            try:
                wait_until(lambda: _moved_to(stack, sick_name, node), 3 * RESTORE_LIMIT_S, "the move", 0.5)
                outcome.recovery_s = round(time.monotonic() - started, 1)
                if outcome.recovery_s > RESTORE_LIMIT_S:
                    outcome.problems.append(
                        f"capacity restored in {outcome.recovery_s} s, over {RESTORE_LIMIT_S}"
                    )
                wait_until(lambda: _settled(stack, sick_name), SETTLE_S, f"{sick_name} settled", 1)
            except AssertionError as error:
                outcome.problems.append(str(error))
            finally:
                if cut_off:
                    _sim_fault(stack, node, "--reconnect")  # the same agent goes on
                    stack.held.discard(agent(node))
                else:
                    _sim_fault(stack, node, "--power-on")
                    stack.restart(agent(node))  # the host boots: its agent starts as systemd starts it
            time.sleep(3)  # requests in flight on the new replica end under load too
        finally:
            clients.stopping.set()
            clients.join(150)
        _judge_clients(clients, outcome)
        _no_move_back(stack, sick_name, node, outcome)
        if cut_off:
            _fenced(stack, sick_name, node, outcome)
    finally:
        for name in (sick_name, other_name):
            stack.call("DELETE", f"/api/v1/deployments/{name}/")
        with contextlib.suppress(AssertionError):
            wait_until(lambda: not _live(stack, (sick_name, other_name)), 30, "the deployments deleted", 1)
        stack.stop_program(agent(SPARE_NODE))
        kill_recorded_engines(stack.sim_roots[SPARE_NODE])


def _fenced(stack: FaultStack, name: str, node: str, outcome: Outcome) -> None:
    """The node is back with the old engine still running: the panel stopped it there (its record gone from
    the host), said so, and the replica on SPARE_NODE still serves."""
    root = str(stack.sim_roots[node])
    try:
        wait_until(
            lambda: runtime.load_record(root, name) is None, FENCE_S, f"{name}'s old engine stopped", 1
        )
    except AssertionError as error:
        outcome.problems.append(str(error))
    events = stack.get(f"/api/v1/deployments/{name}/events/").get("results") or []
    fenced = [event.get("reason") for event in events if event.get("kind") == "engine_fenced"]
    outcome.details.update(fenced=fenced)
    if len(fenced) != 1:
        outcome.problems.append(f"{len(fenced)} engine_fenced events, not one")
    if stack.get(f"/api/v1/deployments/{name}/")["status"] != "running":
        outcome.problems.append(f"{name} does not run after the fence")


def _live(stack: FaultStack, names) -> bool:
    return any(d["name"] in names for d in stack.all_pages("/api/v1/deployments/"))


def _no_move_back(stack: FaultStack, name: str, node: str, outcome: Outcome) -> None:
    """Hysteresis: the node online again moves nothing back to it."""
    try:
        wait_until(lambda: stack.node(node).get("status") == "online", 90, f"{node} online again", 1)
    except AssertionError as error:
        outcome.problems.append(str(error))
        return
    time.sleep(HYSTERESIS_S)
    on = {n for row in _rows(stack, name) for n in _nodes_of(row)}
    moves = _moves(stack, name)
    outcome.details.update(moves=[m.get("reason") for m in moves], nodes_after=sorted(on))
    if node in on:
        outcome.problems.append(f"{name} went back to {node} after it came back")
    if len(moves) != 1:
        outcome.problems.append(f"{len(moves)} replica_moved decisions, not one")
