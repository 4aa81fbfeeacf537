"""Judge the HCCL fabric from the nodes' probe reports (workers.steps.fabric): what fails, and the fix.

`judge(reports)` takes {node: report} and returns
    {"status": pass|warn|fail,
     "checklist": [preflight-style items {"check", "status", "detail", "fix", "templates", "params"}],
     "nodes": {node: {"status", "npus": [per-NPU rows], "interface": report's interface}}}
A row: {"device", "ip", "netmask", "link", "health", "tls", "pings", "status", "problems": [check names]}.

What fails: an NPU without an address (the `-.-.-.-` of rank tables), a link that is not UP, a network health
other than Success (Init, which only means no detect address is set, warns), TLS on for some NPUs and off for
others, an NPU that cannot reach its peer on another node, and a HCCL interface that is missing, down, does
not hold HCCL_IF_IP or cannot reach the other nodes. Partial ping loss warns. Pure: the panel calls it.
"""

from __future__ import annotations

from collections import Counter

from workers.i18n import gettext_noop as _
from workers.steps.preflight import FAIL, PASS, WARN, item, worst

HEALTHY = "Success"
NOT_DETECTING = "Init"


def _devices(rows: list[dict]) -> str:
    return ", ".join(str(row["device"]) for row in rows)


SEVERITY = {PASS: 0, WARN: 1, FAIL: 2}


def _mark(row: dict, status: str, problem: str) -> None:
    row["problems"].append(problem)
    if SEVERITY[status] > SEVERITY[row["status"]]:
        row["status"] = status


def _row(npu: dict) -> dict:
    tls = npu.get("tls_enabled")
    return {
        "device": npu.get("device"),
        "ip": npu.get("ip"),
        "netmask": npu.get("netmask"),
        "link": npu.get("link"),
        "health": npu.get("health"),
        "tls": None if tls is None else ("on" if tls else "off"),
        "pings": list(npu.get("pings") or []),
        "status": PASS,
        "problems": [],
    }


def _node_items(node: str, report: dict, rows: list[dict]) -> list[dict]:
    items = []
    if report.get("hccn_tool") is None:
        items.append(
            item(
                "hccn_tool",
                WARN,
                _("{node}: hccn_tool not found, so its NPU network was not checked"),
                _(
                    "Install the Ascend driver, which puts hccn_tool in /usr/local/Ascend/driver/tools, or "
                    "mount that folder where the agent runs."
                ),
                node=node,
            )
        )
        return items
    no_ip = [r for r in rows if not r["ip"]]
    if no_ip:
        items.append(
            item(
                "npu_ip",
                FAIL,
                _("{node}: no IP address on NPU {devices} (shown as -.-.-.- in rank tables)"),
                _(
                    "Give each NPU's NIC its address: hccn_tool -i <N> -ip -s address <IP> netmask <mask> "
                    "(or the address_<N> line of /etc/hccn.conf); hccn_tool -i <N> -ip -g then shows it."
                ),
                node=node,
                devices=_devices(no_ip),
            )
        )
    down = [r for r in rows if r["link"] != "UP"]
    if down:
        items.append(
            item(
                "npu_link",
                FAIL,
                _("{node}: the NIC link of NPU {devices} is not UP"),
                _(
                    "Check the cable or optical module and the switch port of those NPUs (hccn_tool -i <N> "
                    "-optical -g, -lldp -g); hccn_tool -i <N> -link -g must say UP."
                ),
                node=node,
                devices=_devices(down),
            )
        )
    faulty = [
        r for r in rows if r["health"] not in (HEALTHY, NOT_DETECTING) and r["link"] == "UP" and r["ip"]
    ]
    if faulty:
        items.append(
            item(
                "npu_health",
                FAIL,
                _("{node}: network health of NPU {devices} is {health}"),
                _(
                    "The NPU cannot reach its detect address: check hccn_tool -i <N> -netdetect -g names an "
                    "address on the NPU network and that the link and routes to it work; hccn_tool -i <N> "
                    "-net_health -g must say Success."
                ),
                node=node,
                devices=_devices(faulty),
                health=", ".join(sorted({str(r["health"]) for r in faulty})),
            )
        )
    idle = [r for r in rows if r["health"] == NOT_DETECTING]
    if idle:
        items.append(
            item(
                "npu_health",
                WARN,
                _("{node}: network health of NPU {devices} is Init: no detect address is set"),
                _(
                    "Set an address the NPUs can reach (the gateway or a peer NPU) so the health check runs: "
                    "hccn_tool -i <N> -netdetect -s address <IP>."
                ),
                node=node,
                devices=_devices(idle),
            )
        )
    for status, problem, rows_of in (
        (FAIL, "npu_ip", no_ip),
        (FAIL, "npu_link", down),
        (FAIL, "npu_health", faulty),
    ):
        for row in rows_of:
            _mark(row, status, problem)
    for row in idle:
        _mark(row, WARN, "npu_health")
    return items


def _ping_items(node: str, rows: list[dict]) -> list[dict]:
    items = []
    by_peer: dict[str, dict[str, list]] = {}
    for row in rows:
        for ping in row["pings"]:
            loss = ping.get("loss_pct")
            kind = "fail" if loss is None or loss >= 100 else "lossy" if loss > 0 else "ok"
            by_peer.setdefault(ping.get("node", ""), {"fail": [], "lossy": [], "ok": []})[kind].append(
                (row, ping)
            )
    for peer, kinds in sorted(by_peer.items()):
        if kinds["fail"]:
            items.append(
                item(
                    "npu_ping",
                    FAIL,
                    _("{node}: NPU {devices} cannot reach {peer}'s NPUs ({targets})"),
                    _(
                        "Both ends need their link UP and addresses in one subnet or routed (hccn_tool "
                        "-i <N> -gateway -g), and the switch ports one VLAN; test with hccn_tool -i <N> "
                        "-ping -g address <peer NPU IP>."
                    ),
                    node=node,
                    peer=peer,
                    devices=", ".join(str(row["device"]) for row, _ping in kinds["fail"]),
                    targets=", ".join(ping["target"] for _row, ping in kinds["fail"]),
                )
            )
            for row, _ping in kinds["fail"]:
                _mark(row, FAIL, "npu_ping")
        if kinds["lossy"]:
            items.append(
                item(
                    "npu_ping",
                    WARN,
                    _("{node}: pings from NPU {devices} to {peer} lose packets (up to {loss}%)"),
                    _(
                        "A flapping link or a congested port: hccn_tool -i <N> -link_stat -g lists link "
                        "changes; check the optical module and the switch port."
                    ),
                    node=node,
                    peer=peer,
                    devices=", ".join(str(row["device"]) for row, _ping in kinds["lossy"]),
                    loss=max(ping["loss_pct"] for _row, ping in kinds["lossy"]),
                )
            )
            for row, _ping in kinds["lossy"]:
                _mark(row, WARN, "npu_ping")
    return items


def _interface_items(node: str, interface: dict | None) -> list[dict]:
    if not interface:
        return []
    values = {"node": node, "ifname": interface.get("ifname") or "-", "if_ip": interface.get("if_ip") or "-"}
    if not interface.get("exists"):
        holder = interface.get("holder")
        return [
            item(
                "hccl_interface",
                FAIL,
                _("{node}: no interface {ifname} for HCCL_SOCKET_IFNAME"),
                _(
                    "Name the interface that holds {if_ip} as the node's HCCL interface ({holder} holds it); "
                    "`ip -o -4 addr show` lists them."
                )
                if holder
                else _(
                    "Name an interface `ip -o -4 addr show` lists on {node}, and give the node its address."
                ),
                holder=holder or "-",
                **values,
            )
        ]
    items = []
    if not interface.get("up"):
        items.append(
            item(
                "hccl_interface",
                FAIL,
                _("{node}: interface {ifname} is down"),
                _("Bring it up (ip link set {ifname} up) and check its cable and switch port."),
                **values,
            )
        )
    if interface.get("if_ip") and not interface.get("holds_ip"):
        items.append(
            item(
                "hccl_interface",
                FAIL,
                _("{node}: {ifname} does not hold HCCL_IF_IP {if_ip}"),
                _(
                    "HCCL_IF_IP must be an address of the HCCL interface: set the node's address to one "
                    "{ifname} holds, or name the interface that holds {if_ip}."
                ),
                **values,
            )
        )
    for peer in interface.get("peers") or []:
        if peer.get("loss_pct", 100.0) >= 100:
            items.append(
                item(
                    "hccl_reach",
                    FAIL,
                    _("{node} cannot reach {peer} at {address} over {ifname}"),
                    _(
                        "HCCL's sockets and Gloo connect there: check the routes and firewalls between the "
                        "nodes (HCCL listens on port 16666 and up, vLLM's data parallel RPC port too) and "
                        "that {address} is {peer}'s address on this network."
                    ),
                    peer=peer.get("node", ""),
                    address=peer.get("address", ""),
                    **values,
                )
            )
    if not items:
        items.append(
            item(
                "hccl_interface",
                PASS,
                _("{node}: {ifname} holds {if_ip} and reaches the other nodes"),
                **values,
            )
        )
    return items


def _tls_items(rows_by_node: dict[str, list[dict]]) -> list[dict]:
    settings = Counter(row["tls"] for rows in rows_by_node.values() for row in rows if row["tls"] is not None)
    if len(settings) < 2:
        return []
    usual = settings.most_common(1)[0][0]
    odd = [
        (node, row) for node, rows in rows_by_node.items() for row in rows if row["tls"] not in (None, usual)
    ]
    for _node, row in odd:
        _mark(row, FAIL, "npu_tls")
    return [
        item(
            "npu_tls",
            FAIL,
            _(
                "TLS switch is {odd_setting} on {npus} and {usual_setting} on the other NPUs: they cannot "
                "connect"
            ),
            _(
                "Use one TLS setting on every NPU of every node, for example off: hccn_tool -i <N> -tls -s "
                "enable 0 for each NPU; hccn_tool -i <N> -tls -g shows the switch."
            ),
            # As hccn_tool -tls -g prints it: switch[1] is on, switch[0] off.
            odd_setting="0" if usual == "on" else "1",
            usual_setting="1" if usual == "on" else "0",
            npus=", ".join(f"{node} NPU {row['device']}" for node, row in odd),
        )
    ]


def judge(reports: dict[str, dict]) -> dict:
    rows_by_node = {node: [_row(npu) for npu in report.get("npus") or []] for node, report in reports.items()}
    checklist: list[dict] = []
    # Causes before their effects: an NPU without an address or link first, then the pings that fail on it.
    for node, report in sorted(reports.items()):
        checklist += _node_items(node, report, rows_by_node[node])
    checklist += _tls_items(rows_by_node)
    for node in sorted(reports):
        checklist += _ping_items(node, rows_by_node[node])
    for node, report in sorted(reports.items()):
        checklist += _interface_items(node, report.get("interface"))
    npu_count = sum(len(rows) for rows in rows_by_node.values())
    if npu_count and not any(entry["check"].startswith("npu_") for entry in checklist):
        pinged = any(row["pings"] for rows in rows_by_node.values() for row in rows)
        checklist.insert(
            0,
            item(
                "npu_network",
                PASS,
                _("{count} NPUs on {nodes}: addresses, links, health, TLS and pings OK")
                if pinged
                else _("{count} NPUs on {nodes}: addresses, links, health and TLS OK"),
                count=npu_count,
                nodes=", ".join(sorted(reports)),
            ),
        )
    nodes = {}
    for node, report in reports.items():
        statuses = [row["status"] for row in rows_by_node[node]]
        statuses += [
            entry["status"] for entry in checklist if (entry.get("params") or {}).get("node") == node
        ]
        nodes[node] = {
            "status": FAIL if FAIL in statuses else WARN if WARN in statuses else PASS,
            "npus": rows_by_node[node],
            "interface": report.get("interface"),
        }
    return {"status": worst(checklist) if checklist else PASS, "checklist": checklist, "nodes": nodes}


def _own_failure(row: dict) -> bool:
    """The NPU's own NIC failed (no address, link down, bad health, odd TLS), not only a ping from it."""
    problems = set(row["problems"])
    return bool(problems & {"npu_ip", "npu_link", "npu_tls"}) or (
        "npu_health" in problems and row["health"] not in (HEALTHY, NOT_DETECTING)
    )


def failing_parts(nodes: dict, checklist: list[dict]) -> dict:
    """Where the failures of a verdict (`judge`'s "nodes" and the checklist) are, so a check made for several
    engines can stop only those its failures concern:
        {"nodes": [nodes with a failure of the node itself: HCCL interface, reach, check not run],
         "npus": [[node, logic id] whose own NIC failed],
         "paths": [[node, logic id, peer node, peer logic id] pinged in vain between two sound NPUs]}
    A ping to or from an NPU whose own NIC failed is that NIC's effect, not a path of its own."""
    bad_npus = {
        (node, row["device"]) for node, judged in nodes.items() for row in judged["npus"] if _own_failure(row)
    }
    at = {
        row["ip"]: (node, row["device"])
        for node, judged in nodes.items()
        for row in judged["npus"]
        if row["ip"]
    }
    paths = set()
    for node, judged in nodes.items():
        for row in judged["npus"]:
            for ping in row["pings"]:
                loss = ping.get("loss_pct")
                target = at.get(ping.get("target"), (ping.get("node", ""), None))
                if (
                    (loss is None or loss >= 100)
                    and (node, row["device"]) not in bad_npus
                    and target not in bad_npus
                ):
                    paths.add((node, row["device"], *target))
    failed = [
        entry for entry in checklist if entry["status"] == FAIL and not entry["check"].startswith("npu_")
    ]
    # A node that cannot reach a peer whose own interface failed (or whose check did not run) sees that
    # peer's failure, not one of its own.
    down = {(entry.get("params") or {}).get("node") for entry in failed if entry["check"] != "hccl_reach"}
    whole = {
        (entry.get("params") or {}).get("node")
        for entry in failed
        if entry["check"] != "hccl_reach" or (entry.get("params") or {}).get("peer") not in down
    }
    return {
        "nodes": sorted(name for name in whole if name),
        "npus": sorted([node, device] for node, device in bad_npus),
        "paths": sorted([list(path) for path in paths], key=str),
    }


def first_failure(verdict: dict) -> dict | None:
    """The first failing checklist item: what a stopped launch names as its reason and fix."""
    return next((entry for entry in verdict["checklist"] if entry["status"] == FAIL), None)
