"""Read a host's part of the HCCL fabric: each NPU's RoCE NIC, pings to the other nodes' NPUs, and the
host interface HCCL's sockets use (HCCL_IF_IP / *_SOCKET_IFNAME) with pings to the other nodes on it.

`probe_fabric(runner, request, ascend_root)` returns a report the panel judges across nodes
(workers.steps.fabric_verdict). The request (what the panel sends, every field optional):
    devices    NPU logic ids to read (hccn_tool's -i); None: every one `npu-smi info -m` lists
    peers      [{"node", "host_ip", "npu_ips": [...]}]: this node's NPU number k pings the k-th NPU address of
               each peer (same-index NICs share a plane; direct-attached fabrics only connect those); None in
               npu_ips where that peer NPU has no address. A peer that also gives "devices" (its logic ids,
               aligned with npu_ips) and "pairs" ({"<own logic id>": [its logic ids]}) is pinged on exactly
               those pairs instead (a disaggregated deployment's Mooncake pairs, workers/engine/launch/
               kv_pairs.py); an own NPU the pairs do not name pings none of its NPUs
    if_ip, ifname   the address and interface HCCL is told to use on this node
    pings_only [logic ids]: a second round, once the peers' addresses are known from the first: only these
               NPUs ping (the ones the first round found with an address and the link up), nothing is
               read again (the panel keeps the first round's reads); the report then says "pings_only"
The report:
    {"hccn_tool": path | None,
     "npus": [{"device", "ip", "netmask", "ip_error", "link", "health", "tls_enabled", "tls_preconfigured",
               "pings": [{"node", "target", "sent", "received", "loss_pct"}]}],
     "interface": {"if_ip", "ifname", "exists", "up", "holds_ip", "peers": [{"node", "address",
                   "loss_pct"}]} | None}
Every command is an argv; nothing a peer reports reaches a shell.
"""

from __future__ import annotations

import asyncio
import ipaddress
import re
from pathlib import PurePosixPath

from workers.ascend import hccn
from workers.ascend.npu_smi import npu_smi_argv, parse_mapping

HCCN_TIMEOUT_S = 30
# hccn_tool's ping sends 3 packets with a 1 s timeout each; a dead link takes that long.
PING_TIMEOUT_S = 30
HOST_PING = ["ping", "-c", "3", "-W", "1"]
NOT_INSTALLED = 127

_ADDR_LINE = re.compile(r"^\d+:\s+(?P<ifname>[^\s:@]+)(?:@\S+)?\s+inet6?\s+(?P<address>[0-9A-Fa-f.:]+)/\d+")
_LINK_LINE = re.compile(
    r"^\d+:\s+(?P<ifname>[^\s:@]+)(?:@\S+)?:\s+<(?P<flags>[^>]*)>.*?\bstate\s+(?P<state>\w+)"
)
_LOSS = re.compile(r"(?P<loss>\d+(?:\.\d+)?)% packet loss")


def valid_ip(value) -> str | None:
    """`value` as an IP address in its usual spelling; None when it is none (a peer's word, checked)."""
    try:
        return str(ipaddress.ip_address(str(value)))
    except ValueError:
        return None


async def find_hccn_tool(runner, ascend_root: str) -> str | None:
    """hccn_tool on PATH, else where the driver installs it; None when neither runs."""
    for candidate in (hccn.HCCN_TOOL, str(PurePosixPath(ascend_root) / hccn.HCCN_TOOL_IN_DRIVER)):
        done = await runner.run([candidate, "-h"], timeout=HCCN_TIMEOUT_S)
        if done.exit_status not in (NOT_INSTALLED, None) and not done.timed_out:
            return candidate
    return None


async def logic_ids_of(runner) -> list[int]:
    mapping = await runner.run(npu_smi_argv("mapping"), timeout=HCCN_TIMEOUT_S)
    return sorted({row["logic_id"] for row in parse_mapping(mapping.stdout) if row["logic_id"] is not None})


async def _query(runner, tool: str, query: str, device: int, address: str | None = None) -> dict | None:
    argv = hccn.hccn_argv(query, device, address, binary=tool)
    done = await runner.run(argv, timeout=PING_TIMEOUT_S if query == "ping" else HCCN_TIMEOUT_S)
    # hccn_tool prints its answer on stdout whatever its exit status; no answer is no record.
    try:
        return hccn.parse_one(done.stdout, query)
    except hccn.HccnError:
        return None


async def npu_addresses(runner, ascend_root: str, devices: list[int]) -> dict[str, str | None]:
    """Each NPU's RoCE address by logic id (a JSON object's keys: strings), for the inventory: with them the
    panel's check of NPUs it never checked pings them in its first round, where it had to learn them in that
    round and ping in a second (every failover move onto other NPUs); {} without hccn_tool."""
    tool = await find_hccn_tool(runner, ascend_root)
    if tool is None:
        return {}
    found = {}
    for device in devices:
        record = await _query(runner, tool, "ip", device) or {}
        found[str(device)] = valid_ip(record.get("ipaddr"))
    return found


async def read_npu(runner, tool: str, device: int) -> dict:
    ip = await _query(runner, tool, "ip", device) or {}
    link = await _query(runner, tool, "link", device) or {}
    health = await _query(runner, tool, "net_health", device) or {}
    tls = await _query(runner, tool, "tls", device) or {}
    return {
        "device": device,
        "ip": valid_ip(ip.get("ipaddr")),
        "netmask": ip.get("netmask"),
        "ip_error": ip.get("error", "" if ip else "no answer to hccn_tool -ip -g"),
        "link": link.get("link"),
        "health": health.get("health"),
        "tls_enabled": tls.get("tls_enabled"),
        "tls_preconfigured": tls.get("preconfigured"),
        "pings": [],
    }


def _targets(peer: dict, device: int, position: int) -> list[str]:
    """The peer's NPU addresses this NPU pings: the ones its pairs name, else the one at its own position."""
    # Aligned with the peer's NPUs: None where a peer NPU has no address (its own check says so).
    addresses = [valid_ip(address) for address in peer.get("npu_ips") or []]
    pairs = peer.get("pairs")
    if isinstance(pairs, dict):
        by_device = dict(zip(peer.get("devices") or [], addresses, strict=False))
        wanted = pairs.get(str(device)) or []
        return [address for other in wanted if (address := by_device.get(other))]
    target = addresses[position % len(addresses)] if addresses else None
    return [target] if target else []


async def ping_peers(runner, tool: str, npu: dict, position: int, peers: list[dict]) -> list[dict]:
    pings = []
    for peer in peers:
        for target in _targets(peer, npu["device"], position):
            record = await _query(runner, tool, "ping", npu["device"], target) or {}
            pings.append(
                {
                    "node": str(peer.get("node", "")),
                    "target": target,
                    "sent": record.get("sent"),
                    "received": record.get("received"),
                    # No answer at all (the tool failed) counts as nothing received.
                    "loss_pct": record.get("loss_pct", 100.0) if record.get("sent") is not None else 100.0,
                }
            )
    return pings


def read_interfaces(addresses_text: str, links_text: str) -> dict[str, dict]:
    """{ifname: {"addresses": [...], "up": bool}} from `ip -o addr show` and `ip -o link show`."""
    interfaces: dict[str, dict] = {}
    for line in addresses_text.splitlines():
        if match := _ADDR_LINE.match(line.strip()):
            entry = interfaces.setdefault(match["ifname"], {"addresses": [], "up": False})
            entry["addresses"].append(match["address"])
    for line in links_text.splitlines():
        if match := _LINK_LINE.match(line.strip()):
            entry = interfaces.setdefault(match["ifname"], {"addresses": [], "up": False})
            flags = match["flags"].split(",")
            entry["up"] = "UP" in flags and match["state"] in ("UP", "UNKNOWN")
    return interfaces


async def probe_interface(runner, if_ip: str | None, ifname: str | None, peers: list[dict]) -> dict:
    addresses = await runner.run(["ip", "-o", "addr", "show"], timeout=HCCN_TIMEOUT_S)
    links = await runner.run(["ip", "-o", "link", "show"], timeout=HCCN_TIMEOUT_S)
    interfaces = read_interfaces(addresses.stdout, links.stdout)
    holder = next((name for name, entry in interfaces.items() if if_ip and if_ip in entry["addresses"]), None)
    name = ifname or holder
    entry = interfaces.get(name or "", {})
    pings: list[dict] = []
    result: dict = {
        "if_ip": if_ip,
        "ifname": name,
        "exists": bool(entry),
        "up": bool(entry.get("up")),
        "holds_ip": bool(if_ip) and if_ip in entry.get("addresses", []),
        "holder": holder,
        "peers": pings,
    }
    for peer in peers:
        address = valid_ip(peer.get("host_ip"))
        if address is None:
            continue
        # Only a name `ip` listed goes to ping's -I, so a wrong name in the request cannot become an option.
        argv = [*HOST_PING, *(["-I", name] if entry else []), address]
        done = await runner.run(argv, timeout=PING_TIMEOUT_S)
        loss = _LOSS.search(done.stdout)
        pings.append(
            {
                "node": str(peer.get("node", "")),
                "address": address,
                "loss_pct": float(loss["loss"]) if loss else 100.0,
            }
        )
    return result


async def probe_fabric(runner, request: dict, ascend_root: str) -> dict:
    peers = [peer for peer in request.get("peers") or [] if isinstance(peer, dict)]
    if isinstance(request.get("pings_only"), list):
        return await ping_round(runner, await find_hccn_tool(runner, ascend_root), request, peers)
    if_ip, ifname = valid_ip(request.get("if_ip")), str(request.get("ifname") or "")[:64] or None
    npus = read_npus(runner, request, ascend_root, peers)
    if not (if_ip or ifname or peers):
        (tool, read), interface = await npus, None
    else:  # the host's interface (ip, ping) beside the NPUs (hccn_tool): neither waits for the other
        (tool, read), interface = await asyncio.gather(npus, probe_interface(runner, if_ip, ifname, peers))
    return {"hccn_tool": tool, "npus": read, "interface": interface}


async def read_npus(
    runner, request: dict, ascend_root: str, peers: list[dict]
) -> tuple[str | None, list[dict]]:
    """hccn_tool's path and each NPU's NIC, with its pings where it has an address and its link is up."""
    tool = await find_hccn_tool(runner, ascend_root)
    npus: list[dict] = []
    if tool is not None:
        devices = request.get("devices")
        devices = sorted({int(d) for d in devices}) if devices else await logic_ids_of(runner)
        for position, device in enumerate(devices):
            npu = await read_npu(runner, tool, device)
            if npu["ip"] and npu["link"] == "UP":
                npu["pings"] = await ping_peers(runner, tool, npu, position, peers)
            npus.append(npu)
    return tool, npus


async def ping_round(runner, tool: str | None, request: dict, peers: list[dict]) -> dict:
    """A second round: the NPUs in `pings_only` ping the addresses the first round found, nothing is read
    again (on a loaded host each read is a second or more, and a first check of new NPUs always takes two
    rounds: a whole second round doubled the check of a failover move onto NPUs not checked before)."""
    pinging = {int(device) for device in request["pings_only"]}
    devices = sorted({int(device) for device in request.get("devices") or []})
    npus: list[dict] = []
    if tool is not None:
        for position, device in enumerate(devices):
            if device in pinging:
                npus.append(
                    {
                        "device": device,
                        "pings": await ping_peers(runner, tool, {"device": device}, position, peers),
                    }
                )
    return {"hccn_tool": tool, "npus": npus, "interface": None, "pings_only": True}
