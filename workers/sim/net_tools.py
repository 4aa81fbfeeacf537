"""The sim host's hccn_tool, `ip` and `ping`, answering from workers.sim.fabric in the real tools' formats.

hccn_tool lives where the driver installs it (usr/local/Ascend/driver/tools/hccn_tool), not on PATH, as on
real hosts; `ip` and `ping` come first on the sim's PATH. Only the queries the agent makes are answered:
hccn_tool -i N -ip|-link|-net_health|-tls|-gateway|-netdetect -g and -ping -g address X; `ip -o [-4] addr
show` and `ip -o link show`; `ping -c N [-W S] [-I IFACE] ADDRESS`.
"""

from __future__ import annotations

import sys
import time

from workers.sim import fabric
from workers.sim import state as sim_state
from workers.sim.profiles import get_profile

HCCN_USAGE = "Usage: hccn_tool [-i %d] [-ip -g | -link -g | -net_health -g | -tls -g | -gateway -g | ...]\n"
QUERIES = ("-ip", "-link", "-link_stat", "-net_health", "-tls", "-gateway", "-netdetect", "-ping")


def hccn_tool(argv: list[str], root: str) -> int:
    state = sim_state.load(root)
    if state["faults"]["driver_unloaded"]:
        print("Command execute failed!")
        return 1
    if len(argv) < 4 or argv[0] != "-i" or not argv[1].isdigit() or argv[2] not in QUERIES or argv[3] != "-g":
        sys.stdout.write(HCCN_USAGE)
        return 1
    logic_id, query = int(argv[1]), argv[2]
    profile = get_profile(state["profile"])
    if logic_id not in fabric.logic_ids(profile) or _chip_is_gone(state, profile, logic_id):
        print("The device is not exist!")
        return 1
    if not fabric.has_nics(profile):
        print("Command execute failed!")
        return 1
    view = fabric.npu_view(state, logic_id)
    if query == "-ping":
        return _ping_npu(state, logic_id, view, argv[4:])
    return _show(state, logic_id, view, query)


def _chip_is_gone(state: dict, profile, logic_id: int) -> bool:
    chip = next(chip for chip in profile.chips if chip.logic_id == logic_id)
    return sim_state.chip_is_gone(state, chip.npu_id, chip.chip_id)


def _show(state: dict, logic_id: int, view: dict, query: str) -> int:
    gateway = ".".join(fabric.npu_ip(state["node_name"], 0).split(".")[:3]) + ".1"
    if query == "-ip":
        if view["ip"] is None:
            print("Get ipconf failed, because no ip was preset there!")
            return 1
        print(f"ipaddr:{view['ip']}\nnetmask:255.255.255.0")
    elif query == "-link":
        print(f"link status: {view['link']}")
    elif query == "-link_stat":
        _link_stat(fabric.faults_of(state), logic_id)
    elif query == "-net_health":
        healthy = view["link"] == "UP" and view["ip"] is not None
        print(f"net health status: {'Success' if healthy else 'Fault'}")
    elif query == "-tls":
        print(
            f"dev_id:{logic_id}, tls switch[{int(view['tls'])}](0:disable, 1:enable), "
            "tls preconfigured[1](0:non-preset, 1:preset), tls alarm time threshold[60]days"
        )
    elif query == "-gateway":
        if view["ip"] is None:
            print("Get gateway failed, because no gateway was preset there!")
            return 1
        print(f"default gateway:{gateway}, Iface:eth{logic_id}")
    else:
        print(f"netdetect address: {gateway}")
    return 0


def _link_stat(faults: dict, logic_id: int) -> None:
    """As the driver prints it: its clock, the counts, then the change records newest first."""
    changes = fabric.link_changes(faults, logic_id)
    downs = sum(1 for _when, state in changes if state == "DOWN")
    prefix = f"[devid {logic_id}]"
    print(f"{prefix}current time        : {_device_time(time.time())}")
    print(f"{prefix}link up count       : {fabric.link_up_count(faults, logic_id)}")
    print(f"{prefix}link down count     : {downs}")
    print(f"{prefix}link change records :")
    for when, state in reversed(changes):
        print(f"{prefix}    {_device_time(when)}    LINK {state}")


def _device_time(when: float) -> str:
    """The device clock as hccn_tool prints it (C's asctime: `Sun Oct  5 10:13:51 2025`)."""
    return time.asctime(time.localtime(when))


def _ping_npu(state: dict, logic_id: int, view: dict, rest: list[str]) -> int:
    if len(rest) != 2 or rest[0] != "address":
        sys.stdout.write(HCCN_USAGE)
        return 1
    address = rest[1]
    reaches = (
        view["ip"] is not None
        and view["link"] == "UP"
        and address not in view["unreachable"]
        and fabric.npu_answers(state, address)
    )
    lost = fabric.PING_COUNT if not reaches else fabric.lost_replies(view["ping_loss"])
    print(f"device {logic_id} PING {address}")
    for seq in range(fabric.PING_COUNT):
        # The lost replies come first: a flapping link loses its early packets.
        print(f"recv time out seq={seq}" if seq < lost else f"recv seq={seq},time=0.0{50 + seq}000ms")
    received = fabric.PING_COUNT - lost
    print(
        f"{fabric.PING_COUNT} packets transmitted, {received} received, "
        f"{100.0 * lost / fabric.PING_COUNT:.2f}% packet loss"
    )
    return 0 if lost == 0 else 1


# --- the host's interface ------------------------------------------------------------------------------


def ip(argv: list[str], root: str) -> int:
    state = sim_state.load(root)
    settings, faults = fabric.settings_of(state), fabric.faults_of(state)
    words = [word for word in argv if word not in ("-o", "-4", "-oneline")]
    name = settings["ifname"]
    if words in (["addr", "show"], ["address", "show"], ["addr"], ["a"]):
        print("1: lo    inet 127.0.0.1/8 scope host lo\\       valid_lft forever preferred_lft forever")
        if not faults["iface_down"]:  # a downed interface keeps its address, but `ip` lists it only when up
            print(
                f"2: {name}    inet {settings['host_ip']}/24 scope global {name}\\       valid_lft forever "
                "preferred_lft forever"
            )
        return 0
    if words in (["link", "show"], ["link"]):
        flags, state_word = (
            ("BROADCAST,MULTICAST", "DOWN")
            if faults["iface_down"]
            else ("BROADCAST,MULTICAST,UP,LOWER_UP", "UP")
        )
        print(
            "1: lo: <LOOPBACK,UP,LOWER_UP> mtu 65536 qdisc noqueue state UNKNOWN mode DEFAULT group default"
        )
        print(
            f"2: {name}: <{flags}> mtu 1500 qdisc mq state {state_word} mode DEFAULT group default qlen 1000"
        )
        return 0
    print(f'Object "{" ".join(words)}" is unknown, try "ip help".', file=sys.stderr)
    return 255


def ping(argv: list[str], root: str) -> int:
    state = sim_state.load(root)
    settings, faults = fabric.settings_of(state), fabric.faults_of(state)
    count, interface, address, words = 4, None, None, list(argv)
    while words:
        word = words.pop(0)
        if word in ("-c", "-W", "-I", "-w", "-i") and words:
            value = words.pop(0)
            count = int(value) if word == "-c" else count
            interface = value if word == "-I" else interface
        elif not word.startswith("-"):
            address = word
    if address is None:
        print("ping: usage error: Destination address required", file=sys.stderr)
        return 2
    if interface not in (None, settings["ifname"]):
        print(f"ping: SO_BINDTODEVICE {interface}: No such device", file=sys.stderr)
        return 2
    reaches = not faults["iface_down"] and fabric.host_answers(state, address)
    print(
        f"PING {address} ({address}) from {settings['host_ip']} {settings['ifname']}: 56(84) bytes of data."
    )
    for seq in range(1, count + 1):
        if reaches:
            print(f"64 bytes from {address}: icmp_seq={seq} ttl=64 time=0.04{seq} ms")
    received = count if reaches else 0
    print(f"\n--- {address} ping statistics ---")
    print(
        f"{count} packets transmitted, {received} received, {100 * (count - received) // count}% packet loss"
    )
    return 0 if reaches else 1
