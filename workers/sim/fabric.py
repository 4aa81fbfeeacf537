"""The network of a sim host: each NPU's RoCE NIC (what hccn_tool answers) and the host's own interface
(what `ip` and `ping` answer), with the faults a fabric check must catch.

Addresses follow from the node name, so two sim hosts get different ones without being told. Sim hosts that
join the same "switch" (a directory where each registers its root) see each other: a ping reaches a
registered host's NPU only while that NPU's link is up and it has its address, like on a real fabric. A host
on no switch knows nothing of the world and reaches every address not marked unreachable.

State lives in the host's state.json: settings under "fabric" (host_ip, ifname, switch), faults under
"faults"/"fabric" so that `fault --clear` clears them with the rest.
"""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path

from workers.sim import state as sim_state
from workers.sim.profiles import FAMILY_310P, Profile, get_profile

PING_COUNT = 3
LINK_RECORDS_KEPT = 16  # change records hccn_tool -link_stat lists; older ones drop off
NO_FAULTS = {
    "link_down": [],
    "no_ip": [],
    "tls_on": [],
    "ping_loss": {},
    "link_ups": {},
    "link_changes": {},  # per logic id, [unix time, "UP" | "DOWN"] oldest first, as -link_stat lists them
    "unreachable": [],
    # per logic id, NPU addresses that NPU's pings do not reach (a route or VLAN wrong on one NIC only)
    "npu_unreachable": {},
    "iface_down": False,
}


def _digest(name: str) -> int:
    return int(hashlib.sha256(name.encode()).hexdigest()[:8], 16)


def npu_ip(node_name: str, logic_id: int) -> str:
    """The address of an NPU's RoCE NIC: one /24 per host, the NPU's logic id in the last byte."""
    digest = _digest(node_name)
    return f"10.{20 + digest % 200}.{(digest // 200) % 250}.{10 + logic_id}"


def default_host_ip(node_name: str) -> str:
    digest = _digest(node_name)
    return f"172.20.{digest % 250}.{2 + (digest // 250) % 250}"


def settings_of(state: dict) -> dict:
    fabric = state.get("fabric") or {}  # absent in state files written before the fabric existed
    return {
        "host_ip": fabric.get("host_ip") or default_host_ip(state["node_name"]),
        "ifname": fabric.get("ifname") or "eth0",
        "switch": fabric.get("switch"),
    }


def faults_of(state: dict) -> dict:
    return {**NO_FAULTS, **(state["faults"].get("fabric") or {})}


def has_nics(profile: Profile) -> bool:
    """Atlas 300I cards (310P) have no RoCE NICs: hccn_tool has nothing to answer there."""
    return profile.family != FAMILY_310P


def logic_ids(profile: Profile) -> list[int]:
    return sorted(chip.logic_id for chip in profile.chips)


def npu_view(state: dict, logic_id: int) -> dict:
    """What hccn_tool shows of one NPU: {"ip", "link", "tls", "ping_loss", "unreachable"}; ip None when
    unset."""
    faults = faults_of(state)
    return {
        "ip": None if logic_id in faults["no_ip"] else npu_ip(state["node_name"], logic_id),
        "link": "DOWN" if logic_id in faults["link_down"] else "UP",
        "tls": logic_id in faults["tls_on"],
        "ping_loss": float(faults["ping_loss"].get(str(logic_id), 0.0)),
        "unreachable": list(faults["npu_unreachable"].get(str(logic_id), [])),
    }


# --- changing it ---------------------------------------------------------------------------------------


def _change_faults(root, change) -> None:
    with sim_state.locked(root) as state:
        faults = faults_of(state)
        change(faults)
        state["faults"]["fabric"] = faults


def _check_npu(root, logic_id: int) -> None:
    profile = get_profile(sim_state.load(root)["profile"])
    if logic_id not in logic_ids(profile):
        raise sim_state.SimStateError(
            f"no NPU with logic id {logic_id}; {profile.name} has {logic_ids(profile)}"
        )


def _toggle(faults: dict, key: str, logic_id: int, on: bool) -> None:
    faults[key] = sorted(set(faults[key]) - {logic_id} | ({logic_id} if on else set()))


def set_link(root, logic_id: int, up: bool) -> None:
    """Take a port down or bring it up; each time a downed port comes up its `link up count` grows, as
    hccn_tool's -link_stat counts it."""
    _check_npu(root, logic_id)

    def change(faults):
        if up and logic_id in faults["link_down"]:
            faults["link_ups"] = {**faults["link_ups"], str(logic_id): link_up_count(faults, logic_id) + 1}
        if (logic_id in faults["link_down"]) == up:  # a change: recorded with its time, as the driver does
            kept = link_changes(faults, logic_id)[-(LINK_RECORDS_KEPT - 1) :]
            changes = [*kept, [time.time(), "UP" if up else "DOWN"]]
            faults["link_changes"] = {**faults["link_changes"], str(logic_id): changes}
        _toggle(faults, "link_down", logic_id, not up)

    _change_faults(root, change)


def link_changes(faults: dict, logic_id: int) -> list[list]:
    """The port's recorded changes since the driver started, oldest first: [[unix time, "UP" | "DOWN"]]."""
    return [list(change) for change in (faults.get("link_changes") or {}).get(str(logic_id), [])]


def link_up_count(faults: dict, logic_id: int) -> int:
    """How often the port came up since the driver started: once at start, once per recovery since."""
    return int(faults["link_ups"].get(str(logic_id), 1))


def set_ip(root, logic_id: int, present: bool) -> None:
    _check_npu(root, logic_id)
    _change_faults(root, lambda faults: _toggle(faults, "no_ip", logic_id, not present))


def set_tls(root, logic_id: int, enabled: bool) -> None:
    _check_npu(root, logic_id)
    _change_faults(root, lambda faults: _toggle(faults, "tls_on", logic_id, enabled))


def set_ping_loss(root, logic_id: int, percent: float) -> None:
    _check_npu(root, logic_id)
    if not 0 <= percent <= 100:
        raise sim_state.SimStateError(f"ping loss is a percentage from 0 to 100, not {percent}")

    def change(faults):
        faults["ping_loss"] = {k: v for k, v in faults["ping_loss"].items() if k != str(logic_id)}
        if percent:
            faults["ping_loss"][str(logic_id)] = percent

    _change_faults(root, change)


def set_unreachable(root, address: str, unreachable: bool = True) -> None:
    """The host's interface cannot reach `address` (a firewall, a wrong VLAN)."""

    def change(faults):
        faults["unreachable"] = sorted(
            set(faults["unreachable"]) - {address} | ({address} if unreachable else set())
        )

    _change_faults(root, change)


def set_npu_unreachable(root, logic_id: int, address: str, unreachable: bool = True) -> None:
    """This NPU's pings do not reach the NPU address `address` (the other NPUs of the host still do)."""
    _check_npu(root, logic_id)

    def change(faults):
        kept = set(faults["npu_unreachable"].get(str(logic_id), [])) - {address}
        addresses = sorted(kept | ({address} if unreachable else set()))
        others = {key: value for key, value in faults["npu_unreachable"].items() if key != str(logic_id)}
        faults["npu_unreachable"] = {**others, **({str(logic_id): addresses} if addresses else {})}

    _change_faults(root, change)


def set_iface_up(root, up: bool) -> None:
    _change_faults(root, lambda faults: faults.update(iface_down=not up))


def set_host(root, host_ip: str | None = None, ifname: str | None = None) -> None:
    with sim_state.locked(root) as state:
        fabric = dict(state.get("fabric") or {})
        if host_ip:
            fabric["host_ip"] = host_ip
        if ifname:
            fabric["ifname"] = ifname
        state["fabric"] = fabric


def join_switch(root, switch: str | Path) -> None:
    """Put the host on a switch shared with other sim hosts: they see each other's NPUs and interfaces."""
    switch = Path(switch).resolve()
    switch.mkdir(parents=True, exist_ok=True)
    with sim_state.locked(root) as state:
        state["fabric"] = {**(state.get("fabric") or {}), "switch": str(switch)}
        (switch / f"{state['node_name']}.json").write_text(json.dumps({"root": str(Path(root).resolve())}))


# --- what the network does -----------------------------------------------------------------------------


def _neighbours(state: dict) -> list[dict]:
    """The states of the other hosts on this host's switch."""
    switch = settings_of(state)["switch"]
    if not switch or not Path(switch).is_dir():
        return []
    states = []
    for entry in sorted(Path(switch).glob("*.json")):
        root = json.loads(entry.read_text())["root"]
        try:
            other = sim_state.load(root)
        except sim_state.SimStateError:
            continue  # a host removed since it joined
        if other["node_name"] != state["node_name"]:
            states.append(other)
    return states


def npu_answers(state: dict, address: str) -> bool:
    """Whether an NPU at `address` answers pings from this host's fabric."""
    if not settings_of(state)["switch"]:
        return True
    for other in [state, *_neighbours(state)]:
        profile = get_profile(other["profile"])
        for logic_id in logic_ids(profile) if has_nics(profile) else []:
            view = npu_view(other, logic_id)
            if view["ip"] == address:
                return view["link"] == "UP"
    return False


def host_answers(state: dict, address: str) -> bool:
    """Whether a host interface at `address` answers pings from this host."""
    if address in faults_of(state)["unreachable"]:
        return False
    if not settings_of(state)["switch"]:
        return True
    for other in [state, *_neighbours(state)]:
        if settings_of(other)["host_ip"] == address:
            return not faults_of(other)["iface_down"]
    return False


def lost_replies(percent: float) -> int:
    return round(PING_COUNT * percent / 100.0)
