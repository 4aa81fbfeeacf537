"""The NPU network check (panel.fabric) in tests: simulated hosts on one switch whose tools the agent's
probe runs, and the check a multi-node launch waits for passed as a healthy host's agent would pass it (for
tests of the orchestration after it, where agents are not involved)."""

import os
from pathlib import Path

from workers.hosts import LocalRunner
from workers.sim import fabric as sim_fabric
from workers.sim.tree import create_host


def hosts_on_one_switch(tmp_path: Path, names, subnet: str) -> dict[str, Path]:
    """Sim Atlas 800I A2 hosts `names` on one switch, the i-th with host address <subnet>.<i + 1>."""
    roots = {}
    for index, name in enumerate(names):
        root = tmp_path / name
        create_host(root, "atlas-800i-a2", name)
        sim_fabric.join_switch(root, tmp_path / "switch")
        sim_fabric.set_host(root, host_ip=f"{subnet}.{index + 1}")
        roots[name] = root
    return roots


def sim_path(root: Path) -> dict[str, str]:
    """The environment that finds a sim host's tools (hccn_tool, npu-smi, ip, ping) before the system's."""
    return {"PATH": f"{root / 'bin'}{os.pathsep}{os.environ['PATH']}"}


def runner_for(root: Path) -> LocalRunner:
    return LocalRunner(base_env=sim_path(root))


def healthy_report(request: dict, subnet: int) -> dict:
    """What a node's agent reports for `request` on a healthy host whose NPUs sit in 10.9.<subnet>.0/24."""
    npus = []
    for position, device in enumerate(request["devices"]):
        pings = []
        for peer in request["peers"]:
            target = peer["npu_ips"][position] if position < len(peer["npu_ips"]) else None
            if target:
                pings.append(
                    {"node": peer["node"], "target": target, "sent": 3, "received": 3, "loss_pct": 0.0}
                )
        npus.append(
            {
                "device": device,
                "ip": f"10.9.{subnet}.{device + 10}",
                "netmask": "255.255.255.0",
                "link": "UP",
                "health": "Success",
                "tls_enabled": False,
                "tls_preconfigured": True,
                "pings": pings,
            }
        )
    if "pings_only" in request:  # a second round: only pings, from the NPUs it names
        pinging = [{"device": npu["device"], "pings": npu["pings"]} for npu in npus]
        npus = [npu for npu in pinging if npu["device"] in request["pings_only"]]
        return {"hccn_tool": "hccn_tool", "npus": npus, "interface": None, "pings_only": True}
    interface = None
    if request["peers"]:
        reach = [{"node": p["node"], "address": p["host_ip"], "loss_pct": 0.0} for p in request["peers"]]
        interface = {
            "if_ip": request["if_ip"],
            "ifname": request["ifname"],
            "exists": True,
            "up": True,
            "holds_ip": True,
            "holder": request["ifname"],
            "peers": reach,
        }
    return {"hccn_tool": "hccn_tool", "npus": npus, "interface": interface}


def network_checked() -> int:
    """Pass every pending NPU network check operation, round after round, as the ingest applies them;
    returns how many operations were passed."""
    from django.db import transaction

    from panel.operations.models import Operation
    from panel.operations.services import on_terminal

    passed = 0
    while pending := list(
        Operation.objects.filter(kind="fabric_check", status="pending").order_by("created")
    ):
        for operation in pending:
            subnet = operation.node.pk % 250  # one /24 per node
            operation.status = "succeeded"
            operation.result = {"report": healthy_report(operation.task_kwargs["request"], subnet)}
            operation.save()
            with transaction.atomic():
                on_terminal(operation)
            passed += 1
    return passed
