"""The NPU network check a multi-node launch waits for (panel.fabric), passed as a healthy host's agent
would pass it: for tests of the orchestration after it, where agents are not involved."""


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
