"""Use-cases of the NPU network (HCCL fabric) check: start one on some nodes, take each node's report as its
operation ends, judge them together, keep each node's rows, and gate a multi-node launch on the verdict.

A check sends one agent operation (agent.fabric_check) per node. Each node's NPUs ping the NPUs at the same
position on every other node, at the addresses the panel knows from earlier checks; when the reports show
addresses the panel did not know (a first check, or NPUs not checked before) or that changed, a second round
pings the right ones, and only pings: the first round's reads stand (a second round that read everything
again doubled the check of a failover move onto new NPUs on a loaded host). The
verdict (workers.steps.fabric_verdict) lands on the check and, per node, on NodeFabric for the node page.

Gate: `gate_launch(deployment)` starts the check of a multi-node deployment on NPUs before its launch goes
out (panel.deployments.services.launch); when that check ends it sends fabric.signals.fabric_check_finished,
and panel.deployments.launch.fabric_gate sends the launches (a check that passes or only warns) or stops the
deployment (failed) with the first failure and its fix as the reason.
"""

from __future__ import annotations

import logging

import pydantic
from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext_noop

from panel.core.domain.choices import OperationKind, OperationStatus
from panel.fabric.models import FabricCheck, FabricStatus, NodeFabric
from panel.fabric.signals import fabric_check_finished
from panel.nodes.models import Node
from panel.operations.models import Operation
from panel.operations.services import create_operation
from workers.contracts import FabricReport
from workers.steps.fabric import valid_ip
from workers.steps.fabric_verdict import failing_parts, judge
from workers.steps.preflight import FAIL, item
from workers.task_names import AGENT_FABRIC_CHECK

log = logging.getLogger(__name__)


def devices_of(node, deployment=None) -> list[int]:
    """The logic ids to check on `node`: those the deployment holds there, else every NPU of the node."""
    npus = deployment.npus.filter(node=node) if deployment is not None else node.npus.all()
    return sorted({npu.logic_id for npu in npus if npu.logic_id is not None})


def _known_ips(node, devices: list[int]) -> list[str | None]:
    """The node's NPU addresses in `devices` order, as its last check read them, else as its inventory did
    (`npu_roce_ips`: a check's NPUs are often not the last check's, and a first round that knows no address
    pings nothing); None where neither says. One that changed since is learnt by a second round."""
    fabric = NodeFabric.objects.filter(node=node).first()
    ips = fabric.npu_ips() if fabric else {}
    inventory = (node.facts or {}).get("npu_roce_ips") if isinstance(node.facts, dict) else None
    inventory = inventory if isinstance(inventory, dict) else {}
    return [ips.get(device) or valid_ip(inventory.get(str(device))) for device in devices]


def _request(check: FabricCheck, node, plan: dict, addresses: dict[str, list], read: dict | None) -> dict:
    """What one node's agent does this round; `read`: its report of the first round, when this is the second
    (only its NPUs with an address and the link up ping, nothing is read again)."""
    devices = plan["devices"][node.name]
    # A plan may pair nodes (a disaggregated engine's host with the other role's only); else all ping all.
    names = (plan.get("peers") or {}).get(node.name, check.node_names)
    peers = [
        {
            "node": other,
            "host_ip": plan["interfaces"][other][0],
            "npu_ips": addresses[other],
            **_pairs_with(plan, node.name, other),
        }
        for other in names
        if other != node.name
    ]
    if_ip, ifname = plan["interfaces"][node.name]
    # One node alone has no peer to reach, and its address may be a name or a NAT address: no interface check.
    interface = {"if_ip": if_ip, "ifname": ifname} if peers else {}
    if read is not None:
        up = [npu["device"] for npu in read.get("npus") or [] if npu.get("ip") and npu.get("link") == "UP"]
        return {"devices": devices, "peers": peers, "pings_only": up}
    return {"devices": devices, "peers": peers, **interface}


def _pairs_with(plan: dict, node: str, other: str) -> dict:
    """A plan of NPU pairs (a disaggregated deployment's: [prefill node, logic id, decode node, logic id]):
    the pairs `node` pings on `other` (the prefill end pings; a decode host's NPUs ping none), with the
    peer's logic ids the addresses are aligned with. A plan without pairs: {} (each NPU pings the peer's at
    its own position)."""
    if "pairs" not in plan:
        return {}
    pairs: dict[str, list[int]] = {}
    for prefill_node, prefill_id, decode_node, decode_id in plan["pairs"]:
        if (prefill_node, decode_node) == (node, other):
            pairs.setdefault(str(prefill_id), []).append(decode_id)
    return {"devices": plan["devices"][other], "pairs": {key: sorted(ids) for key, ids in pairs.items()}}


def _send_round(
    check: FabricCheck,
    nodes: dict,
    plan: dict,
    addresses: dict[str, list],
    user=None,
    read: dict | None = None,
) -> None:
    check.requests = {}
    for name in check.node_names:
        request = _request(check, nodes[name], plan, addresses, None if read is None else read.get(name, {}))
        check.requests[name] = request
        create_operation(
            kind=OperationKind.FABRIC_CHECK,
            node=nodes[name],
            task_name=AGENT_FABRIC_CHECK,
            user=user,
            target=check.deployment or name,
            params={"fabric_check": check.pk, "round": check.round},
            task_kwargs={"request": request},
        )
    check.save()


def start_check(
    nodes,
    *,
    user=None,
    deployment=None,
    interfaces: dict | None = None,
    devices: dict[str, list[int]] | None = None,
    peers: dict[str, list[str]] | None = None,
    pairs: list[list] | None = None,
) -> FabricCheck:
    """Check the NPU network of `nodes` (together when several). `interfaces` gives each node's
    (HCCL_IF_IP, interface name); by default the node's address and the interface that holds it. `devices`
    ({node: logic ids}) and `peers` ({node: the nodes it pings}) narrow the check; by default the NPUs the
    deployment holds on each node, every node pinging every other. `pairs` ([prefill node, logic id, decode
    node, logic id]): the only NPU pairs pinged, each once from its prefill end."""
    nodes = {node.name: node for node in nodes}
    devices = devices or {name: devices_of(node, deployment) for name, node in nodes.items()}
    plan = {
        **({"peers": peers} if peers else {}),
        **({"pairs": sorted(list(pair) for pair in pairs)} if pairs is not None else {}),
        "devices": devices,
        "interfaces": {
            name: tuple((interfaces or {}).get(name) or (node.address or None, None))
            for name, node in nodes.items()
        },
    }
    with transaction.atomic():
        check = FabricCheck.objects.create(
            node_names=sorted(nodes),
            deployment=deployment.name if deployment is not None else "",
            created_by=user,
            verdict={"plan": plan},
        )
        addresses = {name: _known_ips(node, devices[name]) for name, node in nodes.items()}
        _send_round(check, nodes, plan, addresses, user=user)
    return check


def _round_operations(check: FabricCheck):
    return Operation.objects.filter(
        kind=OperationKind.FABRIC_CHECK, params__fabric_check=check.pk, params__round=check.round
    ).select_related("node")


def _fresh_addresses(check: FabricCheck, reports: dict[str, dict]) -> dict[str, list]:
    plan = check.verdict["plan"]
    fresh = {}
    for name, report in reports.items():
        read = {npu["device"]: npu.get("ip") for npu in report.get("npus") or []}
        fresh[name] = [read.get(device) for device in plan["devices"][name]]
    return fresh


def _needs_second_round(check: FabricCheck, fresh: dict[str, list]) -> bool:
    """True when some node pinged addresses other than the ones its peers turned out to have."""
    for request in check.requests.values():
        for peer in request.get("peers") or []:
            if "pairs" in peer and not peer["pairs"]:
                continue  # pings none of that peer's NPUs (a decode host: the prefill end pings)
            now = fresh.get(peer["node"])
            # A peer with no address at all has nothing to ping: its own failure says why.
            if now is not None and any(now) and [ip or None for ip in peer["npu_ips"]] != now:
                return True
    return False


def on_operation_terminal(operation: Operation) -> None:
    """A fabric check operation ended (panel.operations.signals.operation_ended)."""
    check = (
        FabricCheck.objects.select_for_update()
        .filter(pk=(operation.params or {}).get("fabric_check"))
        .first()
    )
    if check is None or check.status != FabricStatus.RUNNING:
        return
    if (operation.params or {}).get("round") != check.round:
        return  # a late end of an earlier round
    operations = list(_round_operations(check))
    if any(not op.is_terminal for op in operations):
        return
    reports, refused = _read_reports(op for op in operations if op.status == OperationStatus.SUCCEEDED)
    failed = {
        op.node.name: op
        for op in operations
        if op.node is not None and op.status != OperationStatus.SUCCEEDED
    }
    if not failed and not refused and check.round == 1:
        fresh = _fresh_addresses(check, reports)
        if _needs_second_round(check, fresh):
            check.round = 2
            check.verdict = {**check.verdict, "read": reports}  # the reads the second round's pings join
            nodes = {node.name: node for node in Node.objects.filter(name__in=check.node_names)}
            _send_round(check, nodes, check.verdict["plan"], fresh, user=check.created_by, read=reports)
            return
    read = check.verdict.get("read") or {}
    reports = {name: _with_pings(read.get(name) or {}, report) for name, report in reports.items()}
    _finish(check, reports, failed, refused)


def _read_reports(operations) -> tuple[dict[str, dict], dict[str, str]]:
    """Each node's report as the panel reads it ({node: report}), and the nodes whose report it refused, with
    why ({node: the first error}): one agent's malformed report fails its own node, not the whole check."""
    reports, refused = {}, {}
    for op in operations:
        if op.node is None:
            continue
        result = op.result if isinstance(op.result, dict) else {"report": op.result}
        try:
            report = FabricReport.model_validate(result.get("report") or {})
        except pydantic.ValidationError as error:
            first = error.errors()[0]
            where = ".".join(str(part) for part in first["loc"]) or "report"
            refused[op.node.name] = f"{where}: {first['msg']}"[:200]
            log.warning("refused the NPU network report of %s: %s", op.node.name, refused[op.node.name])
            continue
        reports[op.node.name] = report.model_dump(exclude_unset=True)
    return reports, refused


def _with_pings(first: dict, second: dict) -> dict:
    """A node's report of the whole check: the first round's reads with the second round's pings (an agent
    from before `pings_only` read everything again: its report stands alone)."""
    if not second.get("pings_only"):
        return second
    pings = {npu["device"]: npu["pings"] for npu in second.get("npus") or []}
    npus = [
        {**npu, "pings": pings.get(npu["device"], npu.get("pings") or [])} for npu in first.get("npus") or []
    ]
    return {**first, "npus": npus}


def _finish(
    check: FabricCheck, reports: dict[str, dict], failed: dict[str, Operation], refused: dict[str, str]
) -> None:
    verdict: dict = judge(reports) if reports else {"status": "pass", "checklist": [], "nodes": {}}
    unread = [
        item(
            "fabric_check",
            FAIL,
            gettext_noop("{node}: the NPU network check did not run: {error}"),
            gettext_noop(
                "Make sure the node's agent runs (or the node is reachable over SSH), then check again."
            ),
            node=name,
            error=op.error or op.status,
        )
        for name, op in sorted(failed.items())
    ] + [
        item(
            "fabric_report",
            FAIL,
            gettext_noop("{node}: the panel refused its agent's NPU network report ({error})"),
            gettext_noop(
                "The agent sent a report the panel cannot read: bring the node's agent to the panel's "
                "version, then check again."
            ),
            node=name,
            error=error,
        )
        for name, error in sorted(refused.items())
    ]
    checklist = unread + verdict["checklist"]
    status = FAIL if unread else verdict["status"]
    now = timezone.now()
    check.status, check.finished = status, now
    check.verdict = {
        "plan": check.verdict.get("plan"),
        "status": status,
        "checklist": checklist,
        # Which nodes, NPUs and NPU pairs failed: a check several engines wait for stops only those it
        # concerns (panel/deployments/launch/fabric_gate.py).
        "failing": failing_parts(verdict["nodes"], checklist),
    }
    check.save()
    for name, node_verdict in verdict["nodes"].items():
        node = Node.objects.filter(name=name).first()
        if node is None:
            continue
        NodeFabric.objects.update_or_create(
            node=node,
            defaults={
                "fabric_check": check,
                "status": node_verdict["status"],
                "checked_at": now,
                "peers": [other for other in check.node_names if other != name],
                "npus": node_verdict["npus"],
                "interface": node_verdict["interface"],
                "checklist": [e for e in checklist if (e.get("params") or {}).get("node") in (name, None)],
                "report": reports.get(name) or {},
            },
        )
    if check.deployment:
        fabric_check_finished.send(FabricCheck, check=check)


# --- the launch gate ------------------------------------------------------------------------------------


def gate_launch(deployment, user=None) -> bool:
    """Start the NPU network check of a multi-node deployment on NPUs; True when its launch now waits for
    it (the check sends the launches itself once the network checks out)."""
    parts = deployment.spec.get("parts") or []
    if len(parts) < 2 or not deployment.npus.exists():
        return False
    interfaces = {}
    for part in parts:
        multi_node = (part.get("launch") or {}).get("multi_node") or {}
        interfaces[part["node"]] = (multi_node.get("node_ip") or None, multi_node.get("ifname") or None)
    nodes = list(Node.objects.filter(name__in=interfaces))
    check = start_check(nodes, user=user, deployment=deployment, interfaces=interfaces)
    deployment.runtime = {**(deployment.runtime or {}), "fabric_check": check.pk}
    return True
