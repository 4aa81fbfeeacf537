"""NPU failover on sim hosts: faults injected under 16 streaming clients, capacity restored and requests kept.

    .venv/bin/python bench/failover.py [--clients 16] [--dp-clients 8] [--tokens 30] [--token-delay 0.05]
        [--only NAME ...]

Real parts: the whole panel as `make run` starts it (python -m panel.run: web with the /v1 gateway, panel
worker, beat with the reconcile tick, agents on the simulated hosts sim-a2 and sim-duo, embedded Redis) on a
scratch data directory and free ports. Two deployments serve one model name through the gateway, one engine
each: `fo-a` on sim-a2 (where the faults go) and `fo-b` on sim-duo. --clients clients stream chats through
the gateway back to back for the whole run.

Beside them a multi-node deployment, `fo-dp` (bench/failover_dp.py): one engine, data parallel 2, over two
more A2 sim hosts the bench adds (sim-dp1..3, with agents of its own; the third is where a lost node's part
goes), a head and a headless follower, serving a model name of its own to --dp-clients clients of its own;
`fo-dp-b`, one engine on sim-dp3, serves that name too (the replica a request not started is tried on).
Two scenarios hit it: `dp_link_down`, the RoCE link of its follower's NPU (the whole replica is planned
again, head included: panel/deployments/failover/replace.py `_whole`), and `dp_node_power_off`, the power
of its head's node (both parts start again on the two other hosts). Capacity restored: a row of fo-dp
running, every part up, on NPUs off the failed one / the lost node.

Each NPU scenario injects one fault into the chip under fo-a with the sim host's own fault command
(`python -m workers.sim fault --root <host tree> --npu N ...`, which makes npu-smi / hccn_tool print what the
field prints): health Critical, an ECC burst (double-bit HBM errors), the RoCE link down, the chip gone. The
agent's metrics carry it to the health policy, which marks the NPU failed; the gateway excludes fo-a at once
and the leader re-places it (a surge replica first). Capacity restored: from the fault to the moment a row of
fo-a runs on an NPU that is not the failed one (seconds, measured from the API every 0.5 s). Then the sim
fault is cleared; the failed NPU stays out (the policy holds it until an admin says otherwise).

The node power-off scenario runs first, while fo-a is on sim-a2 and fo-b on sim-duo: `fault --power-off`
(workers/sim/power.py) kills sim-a2's engines at once and stops its agent (no heartbeat, no answer). The
heartbeat sweep marks the node offline after three missed heartbeats and the gateway leaves fo-a out; once the
node stayed offline past the failover's bound (panel/deployments/failover/policy.py, node_offline_s) the
leader re-places fo-a on sim-duo (free NPUs and the model's copy). Capacity restored: from the power cut to a
row of fo-a running on another node. Then the power comes back (`--power-on`: the agent boots again), the
bench waits for the node to be online and HYSTERESIS_S more, and counts a move back if fo-a left sim-duo by
itself. Then the bench, as an admin would, applies fo-a's spec to put it on sim-a2 again (a rolling update,
not a failover move, so it is not counted), where the NPU scenarios find it.

Per request the clients record: answered whole ([DONE]); failed before its first byte (a non-200, or a 200
with no data: "failed_unstarted_requests"); cut after its first byte ("cut_streams"), and whether the cut
ended with an OpenAI error event a client can read ("cut_streams_with_error": `{"error": {"message", "code"}}`
with both given; "cut_causes" counts their codes, e.g. upstream_broken when an engine died mid-answer).
"moved_back_and_forth" counts moves of fo-a onto NPUs an earlier move took it off
(panel/deployments/failover/policy.py).

Each scenario's "phases" say where its time went (seconds from the fault): "moved_s" (the failover's
replica_moved) and per row of the deployment ("rows", the surge that restores capacity first, then the row
replaced after it) "network_check_s" and "launch_s" ([first sent, last ended] of its operations since the
fault; "network_check_operations" counts the check's, one per node and round).

Last line JSON: {"scenarios", "recovered", "capacity_restored_s_max", "failed_unstarted_requests",
"cut_streams", "cut_streams_with_error", "moved_back_and_forth", "per_scenario", "cut_causes", "requests",
"requests_by_model", "load_1m"} (the machine's 1-minute load average when the bench started and ended):
both deployments' clients added up, moves back and forth counted per deployment. Each entry of
"per_scenario" names the deployment it hit and carries the answers that ended while its scenario ran
(from its fault until the next scenario begins: "cut_streams", "cut_streams_with_error",
"failed_unstarted_requests", "cut_causes"; "by_model" splits them by the model the clients asked for); the
few that end before the first scenario or after the last count under "outside_scenarios".
Targets: capacity_restored_s_max <= 60, failed_unstarted_requests 0, cut_streams_with_error == cut_streams.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from datetime import datetime
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench import failover_dp as dp  # noqa: E402
from bench.api_race import MODEL, Panel, sign_in, start_panel, wait_for_model  # noqa: E402
from panel.deployments.failover.policy import back_and_forth  # noqa: E402  (pure: no Django needed)

SERVED = "fo"
SICK, HEALTHY = ("fo-a", "sim-a2"), ("fo-b", "sim-duo")
RESTORE_TIMEOUT_S = 180
HYSTERESIS_S = 20  # after the node is back: long enough for several reconcile ticks to move anything back
ONLINE_TIMEOUT_S = 120
SCENARIOS = {
    "node_power_off": ["--power-off"],  # first: it needs fo-a and fo-b on different nodes
    "critical": ["--health", "Critical"],
    "ecc_burst": ["--ecc-burst", "64"],
    "link_down": ["--link-down"],
    "chip_gone": ["--chip-gone"],
    # The multi-node DP deployment's (bench/failover_dp.py): its follower's link, then its head's node.
    "dp_link_down": ["--link-down"],
    "dp_node_power_off": ["--power-off"],
}
NODE_FAULTS = {"node_power_off": ["--power-on"], "dp_node_power_off": ["--power-on"]}  # how each ends
DP_SCENARIOS = ("dp_link_down", "dp_node_power_off")
PROMPT = [{"role": "user", "content": "Tell me about NPU failover."}]


class Clients(threading.Thread):
    """--clients streaming clients, back to back, on an event loop of their own; counts what each answer
    was: whole, failed before its first byte, cut after it (with or without an error event)."""

    def __init__(self, url: str, headers: dict, clients: int, tokens: int, model: str = SERVED):
        super().__init__(daemon=True)
        self.url, self.headers, self.clients, self.tokens = url, headers, clients, tokens
        self.model = model  # the served model name (tests/faults/failover_scenarios.py asks its own)
        self.counts = {"whole": 0, "unstarted": 0, "cut": 0, "cut_with_error": 0}
        self.causes: dict[str, int] = {}  # the error codes cut streams ended with
        # The scenario under way (set by the bench) and what ended during each: {scenario: {kind: n}}.
        self.scenario = ""
        self.by_scenario: dict[str, dict[str, int]] = {}
        self.samples: list[str] = []
        self.stopping = threading.Event()

    def run(self) -> None:
        asyncio.run(self._all())

    async def _all(self) -> None:
        limits = httpx.Limits(max_connections=self.clients * 2)
        client = httpx.AsyncClient(base_url=self.url, headers=self.headers, timeout=120, limits=limits)
        async with client:
            await asyncio.gather(*(self._one_client(client) for _ in range(self.clients)))

    async def _one_client(self, client: httpx.AsyncClient) -> None:
        while not self.stopping.is_set():
            kind, sample = await self._one(client)
            if kind == "cut_with_error":
                kind = self._readable(sample)
            self.counts[kind] += 1
            mine = self.by_scenario.setdefault(self.scenario, {})
            mine[kind] = mine.get(kind, 0) + 1
            if kind == "cut_with_error":
                code = f"code:{json.loads(sample)['error']['code']}"
                mine[code] = mine.get(code, 0) + 1
            if kind != "whole" and len(self.samples) < 20:
                self.samples.append(f"{kind}: {sample[-300:]}")

    def _readable(self, event: str) -> str:
        """cut_with_error when the event is OpenAI's error shape with a message and a code naming the cause
        (what an SDK raises and a person can act on), else cut."""
        try:
            error = json.loads(event)["error"]
            message, code = error["message"], error["code"]
        except (ValueError, KeyError, TypeError):
            return "cut"
        if not (isinstance(message, str) and message and isinstance(code, str) and code):
            return "cut"
        self.causes[code] = self.causes.get(code, 0) + 1
        return "cut_with_error"

    async def _one(self, client: httpx.AsyncClient) -> tuple[str, str]:
        body = {"model": self.model, "messages": PROMPT, "max_tokens": self.tokens, "stream": True}
        data_seen, last = False, ""
        try:
            async with client.stream("POST", "/v1/chat/completions", json=body) as answer:
                if answer.status_code != 200:
                    return "unstarted", f"{answer.status_code} {(await answer.aread())[:200]!r}"
                async for line in answer.aiter_lines():
                    if not line.startswith("data:"):
                        continue
                    last = line[5:].strip()
                    if last == "[DONE]":
                        return "whole", ""
                    if '"error"' in last:
                        return ("cut_with_error" if data_seen else "unstarted"), last
                    data_seen = True
        except httpx.HTTPError as error:
            return ("cut" if data_seen else "unstarted"), repr(error)
        return ("cut" if data_seen else "unstarted"), last or "no data"


def npus_of(panel: Panel, name: str) -> frozenset:
    found = panel.deployment(name) or {}
    return frozenset((npu["node"], npu["npu_id"]) for npu in found.get("npus") or [])


def rows_of(panel: Panel, name: str) -> list[dict]:
    """The deployment and its replica rows (surges included), each with its status and NPUs."""
    found = panel.deployment(name)
    if found is None:
        return []
    rows = [found]
    for replica in found.get("replicas") or []:
        row = panel.deployment(replica["name"])
        if row is not None:
            rows.append(row)
    return rows


def restored(panel: Panel, name: str, gone) -> bool:
    """Whether a row of `name` runs off what failed (`gone(npus)`: the row's NPUs still touch it); a
    multi-node row runs only once every part does."""
    for row in rows_of(panel, name):
        held = {(npu["node"], npu["npu_id"]) for npu in row.get("npus") or []}
        if row["status"] == "running" and held and not gone(held):
            return True
    return False


def node_status(panel: Panel, name: str) -> str:
    answer = panel.client.get("/nodes/", params={"name": name})
    answer.raise_for_status()
    body = answer.json()
    found = [n for n in (body.get("results", body) if isinstance(body, dict) else body) if n["name"] == name]
    return found[0]["status"] if found else "missing"


def sim_fault(scratch: Path, node: str, npu: int | None, flags: list[str]) -> None:
    """A fault of one chip (`npu`), or of the whole host (npu None)."""
    root = scratch / "sim" / node
    chip = [] if npu is None else ["--npu", str(npu)]
    command = [sys.executable, "-m", "workers.sim", "fault", "--root", str(root), *chip, *flags]
    subprocess.run(command, cwd=REPO, check=True, capture_output=True, timeout=60)


def sim_clear(scratch: Path, node: str) -> None:
    root = scratch / "sim" / node
    command = [sys.executable, "-m", "workers.sim", "fault", "--root", str(root), "--clear"]
    subprocess.run(command, cwd=REPO, check=True, capture_output=True, timeout=60)


def site(panel: Panel, name: str, target: str) -> tuple[str, int]:
    """Where a scenario's fault goes: fo-a's (first) NPU; the DP deployment's follower part for a link, its
    head's node for a power cut (the part the gateway sends to)."""
    if target == dp.DP:
        return dp.part_of(panel, "head" if name in NODE_FAULTS else "follower")
    return sorted(npus_of(panel, target))[0]


def scenario(panel: Panel, scratch: Path, name: str, flags: list[str], moves: dict) -> dict:
    target = dp.DP if name in DP_SCENARIOS else SICK[0]
    panel.settled(target)
    before = npus_of(panel, target)
    (node, npu_id) = site(panel, name, target)
    whole_node = name in NODE_FAULTS
    if whole_node:
        gone = lambda held: any(where == node for where, _npu in held)  # noqa: E731
    else:
        gone = lambda held: (node, npu_id) in held  # noqa: E731
    started, wall = time.monotonic(), time.time()
    took = None
    try:
        sim_fault(scratch, node, None if whole_node else npu_id, flags)
        while time.monotonic() - started < RESTORE_TIMEOUT_S:
            if restored(panel, target, gone):
                took = time.monotonic() - started
                break
            time.sleep(0.5)
        try:
            panel.settled(target)  # the surge gone, the deployment running off what failed
        except SystemExit as error:
            print(f"{name}: {error}", file=sys.stderr)
    finally:
        if whole_node:
            sim_fault(scratch, node, None, NODE_FAULTS[name])  # the power comes back whatever happened
        else:
            sim_clear(scratch, node)
    after = npus_of(panel, target)
    if after != before:
        moves.setdefault(target, []).append((before, after))
    if whole_node:
        back_in = hysteresis(panel, target, node, after, moves.setdefault(target, []))
    what = node if whole_node else f"{node} NPU {npu_id}"
    print(f"{name}: {what} -> restored in {took} s; {before} -> {after}", file=sys.stderr)
    found = {
        "name": name,
        "deployment": target,
        "npu": node if whole_node else f"{node}:{npu_id}",
        "restored_s": None if took is None else round(took, 1),
        "detected_s": detected(panel, target, node, None if whole_node else npu_id, wall),
        "phases": phases_or_why(panel, target, wall),
    }
    if whole_node:
        found["node_online_again_s"] = back_in
    if whole_node and target == SICK[0]:
        put_back(panel)
    return found


def detected(panel: Panel, target: str, node: str, npu_id: int | None, wall: float) -> float | None:
    """How much of the restore was seeing the fault (fault -> NPU failed, or, for a silent node, -> the
    move off it) rather than the move itself: seconds from the fault's wall time."""
    events = panel.client.get(f"/deployments/{target}/events/").json()
    kinds = ("replica_moved", "npu_failed")
    recent = [e for e in (events.get("results") or []) if e.get("kind") in kinds][:3]
    for event in recent:
        print(f"  {event.get('kind')} {event.get('outcome')}: {event.get('reason')}", file=sys.stderr)
    if npu_id is None:
        seen = [e for e in recent if e.get("kind") == "replica_moved" and node in (e.get("reason") or "")]
    else:
        seen = [
            e for e in recent if e.get("kind") == "npu_failed" and f"NPU {npu_id}/" in (e.get("reason") or "")
        ]
    return round(datetime.fromisoformat(seen[0]["time"]).timestamp() - wall, 1) if seen else None


def phases(panel: Panel, target: str, wall: float) -> dict:
    """Where the restore's time went, in seconds from the fault's wall time: the move (replica_moved), and
    per row of the deployment (the surge first restores capacity; the row replaced after it follows) its NPU
    network check before a multi-node launch (first sent, last ended, its operations: one per node and
    round) and its launches (first sent, last ended), from the events and the operations since the fault."""
    found: dict = {}
    events = panel.client.get(f"/deployments/{target}/events/").json().get("results") or []
    moved = [e["time"] for e in events if e.get("kind") == "replica_moved"]
    if moved and (at := datetime.fromisoformat(moved[0]).timestamp() - wall) >= 0:
        found["moved_s"] = round(at, 1)
    rows: dict[str, dict] = {}
    for kind, key in (("fabric_check", "network_check_s"), ("deploy", "launch_s")):
        answer = panel.client.get("/operations/", params={"kind": kind, "page_size": 50})
        body = answer.json() if answer.status_code == 200 else {}
        for op in body.get("results", body) if isinstance(body, dict) else body:
            sent = datetime.fromisoformat(op["created"]).timestamp() - wall
            if op["target"].startswith(target) and sent >= 0:
                rows.setdefault(op["target"], {}).setdefault(key, []).append((sent, op.get("finished")))
    for row in rows.values():
        for key, ops in list(row.items()):
            ends = [datetime.fromisoformat(end).timestamp() - wall for _sent, end in ops if end]
            row[key] = [round(min(sent for sent, _end in ops), 1), round(max(ends), 1) if ends else None]
            if key == "network_check_s":
                row["network_check_operations"] = len(ops)
    found["rows"] = dict(
        sorted(rows.items(), key=lambda item: min(v[0] for k, v in item[1].items() if k.endswith("_s")))
    )
    return found


def phases_or_why(panel: Panel, target: str, wall: float) -> dict:
    """`phases`, or why they could not be read: a breakdown must not cost the run its figures."""
    try:
        return phases(panel, target, wall)
    except (httpx.HTTPError, KeyError, TypeError, ValueError) as error:
        return {"unread": repr(error)[:200]}


def hysteresis(panel: Panel, target: str, node: str, after: frozenset, moves: list) -> float | None:
    """The node is back: wait for it to be online, then HYSTERESIS_S; a move `target` makes meanwhile (by
    the failover: nobody else changes it) is recorded, so a move back onto the node counts. Returns how
    long the node took to come online after the power-on (None: it did not)."""
    began = time.monotonic()
    online = None
    while time.monotonic() - began < ONLINE_TIMEOUT_S:
        if node_status(panel, node) == "online":
            online = round(time.monotonic() - began, 1)
            break
        time.sleep(1)
    time.sleep(HYSTERESIS_S)
    later = npus_of(panel, target)
    if later != after:
        moves.append((after, later))
        print(f"  after the power came back {target} moved {after} -> {later}", file=sys.stderr)
    return online


def put_back(panel: Panel) -> None:
    """An admin's apply puts fo-a on its node again for the NPU scenarios (a rolling update, not failover)."""
    panel.client.put(f"/deployments/{SICK[0]}/", json=spec(*SICK)).raise_for_status()
    time.sleep(2)  # the rollout begins with the apply; settled() then waits for it to end
    panel.settled(SICK[0])
    where = {node for node, _npu in npus_of(panel, SICK[0])}
    if where != {SICK[1]}:
        raise SystemExit(f"{SICK[0]} is on {sorted(where)} after the apply, not {SICK[1]}")


def spec(name: str, node: str) -> dict:
    return {
        "name": name,
        "model": MODEL,
        "placement": {"node": node, "npus": 1},
        "engine": {"max_model_len": 1024, "served_model_name": SERVED},
    }


def inference_key(panel: Panel) -> dict:
    answer = panel.client.post("/tokens/", json={"name": "failover-bench", "scopes": ["inference"]})
    answer.raise_for_status()
    return {"Authorization": f"Bearer {answer.json()['token']}"}


def cuts_of(kinds: dict[str, int]) -> dict:
    """What ended during one scenario: cut streams (with a readable error or not), failed unstarted ones."""
    return {
        "cut_streams": kinds.get("cut", 0) + kinds.get("cut_with_error", 0),
        "cut_streams_with_error": kinds.get("cut_with_error", 0),
        "failed_unstarted_requests": kinds.get("unstarted", 0),
        "cut_causes": {kind[5:]: n for kind, n in kinds.items() if kind.startswith("code:")},
    }


def added(counts: list[dict[str, int]]) -> dict[str, int]:
    total: dict[str, int] = {}
    for one in counts:
        for kind, n in one.items():
            total[kind] = total.get(kind, 0) + n
    return total


def run_scenarios(panel: Panel, scratch: Path, chosen: list[str], groups: dict, moves: dict) -> list[dict]:
    """The clients stream from start to end; each scenario's answers are counted under its name."""
    results = []
    for clients in groups.values():
        clients.start()
    time.sleep(5)
    for name in chosen:
        for clients in groups.values():
            clients.scenario = name
        results.append(scenario(panel, scratch, name, SCENARIOS[name], moves))
    for clients in groups.values():
        clients.scenario = ""
    time.sleep(5)
    for clients in groups.values():
        clients.stopping.set()
    for clients in groups.values():
        clients.join(120)
    return results


def summary(results: list[dict], groups: dict[str, Clients], moves: dict, load_at_start: float) -> dict:
    """The last line: every client group's answers added up, each scenario's cuts beside its figures."""
    counts = added([c.counts for c in groups.values()])
    for served, clients in groups.items():
        for sample in clients.samples:
            print(f"  {served} {sample}", file=sys.stderr)
    times = [r["restored_s"] for r in results if r["restored_s"] is not None]
    for found in results:
        ended = {served: c.by_scenario.get(found["name"]) or {} for served, c in groups.items()}
        found.update(cuts_of(added(list(ended.values()))))
        found["by_model"] = {served: cuts_of(kinds) for served, kinds in ended.items() if kinds}
    return {
        "scenarios": len(results),
        "recovered": len(times),
        "capacity_restored_s_max": max(times, default=None),
        "failed_unstarted_requests": counts["unstarted"],
        "cut_streams": counts["cut"] + counts["cut_with_error"],
        "cut_streams_with_error": counts["cut_with_error"],
        "moved_back_and_forth": sum(back_and_forth(each) for each in moves.values()),
        "per_scenario": results,
        "cut_causes": added([c.causes for c in groups.values()]),
        "outside_scenarios": cuts_of(added([c.by_scenario.get("") or {} for c in groups.values()])),
        "requests": sum(counts.values()),
        "requests_by_model": {served: sum(c.counts.values()) for served, c in groups.items()},
        "load_1m": {"start": load_at_start, "end": round(os.getloadavg()[0], 1)},
    }


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--dp-clients", type=int, default=8, help="clients of the multi-node deployment")
    parser.add_argument("--tokens", type=int, default=30, help="tokens each answer streams")
    parser.add_argument("--token-delay", type=float, default=0.05, help="the sim engine's seconds per token")
    parser.add_argument("--only", nargs="*", choices=sorted(SCENARIOS), help="scenarios (default: all)")
    args = parser.parse_args()
    chosen = [name for name in SCENARIOS if not args.only or name in args.only]
    with_dp = any(name in DP_SCENARIOS for name in chosen)
    scratch = Path(tempfile.mkdtemp(prefix="failover-"))  # kept when the bench fails: its logs say why
    # The sim engines' timings: panel.run's agents pass their environment on to the engines they start.
    os.environ.update({"SIM_ENGINE_TOKEN_DELAY": str(args.token_delay), "SIM_ENGINE_START_DELAY": "0.5"})
    load_at_start = round(os.getloadavg()[0], 1)  # a shared machine: figures mean little without it
    redis, redis_url = dp.start_redis(scratch)  # the agents bench/failover_dp.py adds need its address
    hosts = dp.DpHosts(scratch, dp.panel_env(scratch, redis_url))
    process, url = start_panel(scratch, {"REDIS_URL": redis_url})
    moves: dict[str, list[tuple[frozenset, frozenset]]] = {}
    groups: dict[str, Clients] = {}
    try:
        panel = Panel(url, sign_in(url))
        wait_for_model(panel)
        deployments = [(name, spec(name, node)) for name, node in (SICK, HEALTHY)]
        if with_dp:
            hosts.set_up()
            deployments += [(dp.FALLBACK, dp.fallback_spec()), (dp.DP, dp.dp_spec())]
        for name, body in deployments:
            panel.client.put(f"/deployments/{name}/", json=body).raise_for_status()
        for name, _body in deployments:
            panel.settled(name)
        key = inference_key(panel)
        groups[SERVED] = Clients(url, key, args.clients, args.tokens)
        if with_dp:
            groups[dp.DP] = Clients(url, key, args.dp_clients, args.tokens, model=dp.DP)
        results = run_scenarios(panel, scratch, chosen, groups, moves)
    finally:
        process.terminate()  # panel.run stops its children and the sim engines
        process.wait(60)
        hosts.close()  # the bench's own agents and their engines
        redis.terminate()
        redis.wait(30)
    print(json.dumps(summary(results, groups, moves, load_at_start)))
    shutil.rmtree(scratch, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
