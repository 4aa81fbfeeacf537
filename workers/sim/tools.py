"""Entry points of the sim host's executables: npu-smi, lscpu, numactl, uname, and the network tools
hccn_tool, ip and ping (workers.sim.net_tools).

DIR/bin/<tool> is a tiny script that calls `main(tool, argv, root)` with root = the script's DIR; keeping
the logic here means a code change takes effect without re-creating the sim root. atc (workers.sim.atc, in
the CANN toolkit's bin/, so its DIR is the toolkit's home) and msmodelslim (workers.sim.msmodelslim, the
stand-in for msModelSlim) have scripts that call their own module's main (workers/sim/tree.py says why).
Output goes to stdout like the real tools, including npu-smi's errors, which the real tool also prints on
stdout.
"""

import json
import os
import sys
import time

from workers.sim import net_tools
from workers.sim import npu_smi_render as render
from workers.sim import state as sim_state
from workers.sim.profiles import FAMILY_310P, Profile, get_profile
from workers.sim.readings import mcu_power_w, mcu_temperature_c, read_chips

# dcmi_init() results the real npu-smi prints and returns from main(); the shell sees them mod 256.
DCMI_DRIVER_NOT_READY = -8005
DCMI_RESOURCE_OCCUPIED = -8020
INVALID_PARAMETER_EXIT = 1

USAGE = """Usage: npu-smi <Command|-h|-v> [Options...]

npu-smi Command:
\t-h            This command's help information
\t--help        This command's help information
\t-v            Show npu-smi version information
\tinfo          Show hardware details
\tset           Modify device configuration properties
\tclear         Clear device information
\tupgrade       Upgrade MCU firmware
"""

INFO_TYPES = ("usages", "common", "memory", "power", "temp", "health", "board", "ecc")


def exit_status(return_code: int) -> int:
    """What a shell sees when a C program calls exit() with a negative code."""
    return return_code & 0xFF


def main(tool: str, argv: list[str], root: str) -> int:
    if tool == "npu-smi":
        return npu_smi(argv, root)
    if tool == "lscpu":
        return lscpu(argv, root)
    if tool == "numactl":
        return numactl(argv, root)
    if tool == "uname":
        return uname(argv, root)
    if tool in ("hccn_tool", "ip", "ping"):
        return getattr(net_tools, tool)(argv, root)
    print(f"unknown sim tool {tool!r}", file=sys.stderr)
    return 2


# --- npu-smi ---------------------------------------------------------------------------------------


def npu_smi(argv: list[str], root: str) -> int:
    if not argv or argv[0] not in ("-h", "--help", "-v", "info", "set", "clear", "upgrade"):
        if argv:
            print("Command or option is not found.")
        print(USAGE, end="")
        return INVALID_PARAMETER_EXIT

    state = sim_state.load(root)
    # Like the real tool, every known command initialises DCMI first and stops if that fails.
    if state["faults"]["driver_unloaded"]:
        print(f"dcmi module initialize failed. ret is {DCMI_DRIVER_NOT_READY}")
        return exit_status(DCMI_DRIVER_NOT_READY)
    if state["faults"]["device_held"]:
        print(f"dcmi model initialized failed, because the device is used. ret is {DCMI_RESOURCE_OCCUPIED}")
        return exit_status(DCMI_RESOURCE_OCCUPIED)

    profile = get_profile(state["profile"])
    command, options = argv[0], argv[1:]
    if command in ("-h", "--help"):
        print(USAGE, end="")
        return 0
    if command == "-v":
        print(f"npu-smi version: {profile.npu_smi_version}")
        return 0
    if command != "info":
        print(f"The sim host does not implement `npu-smi {command}`.")
        return INVALID_PARAMETER_EXIT
    return _info(profile, state, options)


def _info(profile: Profile, state: dict, options: list[str]) -> int:
    now = time.time()
    if not options:
        # A chip that fell off the bus is not listed any more.
        readings = [
            r
            for r in read_chips(profile, state, now)
            if not sim_state.chip_is_gone(state, r.chip.npu_id, r.chip.chip_id)
        ]
        sys.stdout.write(render.render_table(profile, readings))
        return 0
    if options == ["-m"]:
        sys.stdout.write(render.render_mapping(profile))
        return 0
    if options == ["-l"]:
        npu_ids = profile.npu_ids
        serials = {npu: f"033022{index:02d}{npu % 1000:03d}N{index + 7}" for index, npu in enumerate(npu_ids)}
        sys.stdout.write(render.render_list(profile, serials))
        return 0

    if options == ["-t", "topo"]:
        sys.stdout.write(render.render_topo(profile))
        return 0
    return _info_of_npu(profile, state, options, now)


def _info_of_npu(profile: Profile, state: dict, options: list[str], now: float) -> int:
    """`npu-smi info -t <kind> -i <npu> [-c <chip>]`: one NPU's (or chip's, or card MCU's) block."""
    parsed = _parse_flags(options)
    if parsed is None:
        print("Command or option is not found.")
        return INVALID_PARAMETER_EXIT
    kind, npu_id, chip_id = parsed.get("-t"), parsed.get("-i"), parsed.get("-c")
    if kind not in INFO_TYPES:
        print("Error parameter of -t")
        return INVALID_PARAMETER_EXIT
    if npu_id is None or not npu_id.isdigit() or int(npu_id) not in profile.npu_ids:
        print("Error parameter of -i")
        return INVALID_PARAMETER_EXIT
    npu = int(npu_id)
    chip_ids = [chip.chip_id for chip in profile.chips_of(npu)]
    mcu_id = profile.mcu_chip_id(npu) if profile.has_mcu else None
    if chip_id is not None and (not chip_id.isdigit() or int(chip_id) not in [*chip_ids, mcu_id]):
        print("Error parameter of -c")
        return INVALID_PARAMETER_EXIT
    chip = None if chip_id is None else int(chip_id)

    readings = read_chips(profile, state, now)
    if chip is not None and chip == mcu_id:
        return _mcu_info(profile, readings, npu, kind)
    chosen = [r for r in readings if r.chip.npu_id == npu and (chip is None or r.chip.chip_id == chip)]
    present = [r for r in chosen if not sim_state.chip_is_gone(state, npu, r.chip.chip_id)]
    if not present:
        if kind == "health":
            sys.stdout.write(render.render_gone_health())
            return 0
        print("The device does not exist.")
        return INVALID_PARAMETER_EXIT
    if kind == "ecc":
        counts = [(r.chip.chip_id, sim_state.ecc_of(state, npu, r.chip.chip_id)) for r in present]
        sys.stdout.write(render.render_ecc(profile, npu, counts))
        return 0
    if kind == "health":
        worst = max(present, key=lambda r: sim_state.HEALTH_VALUES.index(r.health))
        injected = sim_state.health_of(state, npu, worst.chip.chip_id)
        sys.stdout.write(render.render_health(worst, injected))
        return 0
    _write_block(profile, kind, readings, present, npu, chip)
    return 0


def _write_block(profile: Profile, kind: str, readings, chosen, npu: int, chip: int | None) -> None:
    if kind == "board":
        sys.stdout.write(render.render_board(profile, npu, chip))
    elif kind == "common":
        sys.stdout.write(render.render_common(profile, readings, chosen, npu))
    elif kind == "power" and profile.family == FAMILY_310P:
        # 310P chips cannot report power themselves; the card's MCU does (-c <mcu chip id>).
        print("This device does not support querying power.")
    else:
        sys.stdout.write(render.render_chip_blocks(profile, kind, chosen, npu))


def _mcu_info(profile: Profile, readings, npu: int, kind: str) -> int:
    if kind == "power":
        print(render.kv("Power Dissipation(W)", f"{mcu_power_w(profile, readings, npu):.1f}"))
    elif kind == "temp":
        print(render.kv("Temperature (C)", mcu_temperature_c(profile, readings, npu)))
    elif kind == "health":
        print(render.kv("Health Status", "OK"))
    else:
        print(f"This device does not support querying {kind}.")
    return 0


def _parse_flags(options: list[str]) -> dict[str, str] | None:
    parsed = {}
    if len(options) % 2:
        return None
    for flag, value in zip(options[::2], options[1::2], strict=True):
        if flag not in ("-t", "-i", "-c"):
            return None
        parsed[flag] = value
    return parsed


# --- lscpu -----------------------------------------------------------------------------------------

CPU_FLAGS = (
    "fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid asimdrdm jscvt fcma dcpop "
    "asimddp asimdfhm"
)


def lscpu_fields(profile: Profile) -> list[tuple[str, str]]:
    cpus = profile.cpu_count
    per_socket = cpus // profile.sockets
    nodes = profile.numa_nodes
    fields = [
        ("Architecture:", "aarch64"),
        ("CPU op-mode(s):", "64-bit"),
        ("Byte Order:", "Little Endian"),
        ("CPU(s):", str(cpus)),
        ("On-line CPU(s) list:", f"0-{cpus - 1}"),
        ("Vendor ID:", "HiSilicon"),
        ("Model name:", "Kunpeng-920"),
        ("Model:", "0"),
        ("Thread(s) per core:", "1"),
        ("Core(s) per socket:", str(per_socket)),
        ("Socket(s):", str(profile.sockets)),
        ("Stepping:", "0x1"),
        ("BogoMIPS:", "200.00"),
        ("L1d cache:", f"{cpus * 64 // 1024} MiB ({cpus} instances)"),
        ("L1i cache:", f"{cpus * 64 // 1024} MiB ({cpus} instances)"),
        ("L2 cache:", f"{cpus // 2} MiB ({cpus} instances)"),
        ("L3 cache:", f"{len(nodes) * 32} MiB ({len(nodes)} instances)"),
        ("NUMA node(s):", str(len(nodes))),
    ]
    fields += [(f"NUMA node{node.node_id} CPU(s):", node.cpulist) for node in nodes]
    fields += [
        ("Vulnerability Meltdown:", "Not affected"),
        ("Vulnerability Spec store bypass:", "Vulnerable"),
        ("Vulnerability Spectre v1:", "Mitigation; __user pointer sanitization"),
        ("Vulnerability Spectre v2:", "Not affected"),
        ("Flags:", CPU_FLAGS),
    ]
    return fields


def lscpu(argv: list[str], root: str) -> int:
    profile = get_profile(sim_state.load(root)["profile"])
    fields = lscpu_fields(profile)
    if argv in (["-J"], ["--json"]):
        print(json.dumps({"lscpu": [{"field": key, "data": value} for key, value in fields]}, indent=3))
        return 0
    if argv:
        given = " ".join(argv)
        print(f"lscpu: the sim host supports only plain `lscpu` and `lscpu -J`, not {given}", file=sys.stderr)
        return 1
    for key, value in fields:
        print(f"{key:<33}{value}")
    return 0


# --- numactl ---------------------------------------------------------------------------------------

NUMACTL_USAGE = (
    "usage: numactl [--all | -a] [--interleave= | -i <nodes>] [--preferred= | -p <node>]\n"
    "               [--physcpubind= | -C <cpus>] [--cpunodebind= | -N <nodes>]\n"
    "               [--membind= | -m <nodes>] [--localalloc | -l] command args ...\n"
    "       numactl [--show | -s]\n"
    "       numactl [--hardware | -H]\n"
)
NODE_OPTIONS = {"--cpunodebind": "-N", "--membind": "-m", "--interleave": "-i", "--preferred": "-p"}
CPU_OPTIONS = {"--physcpubind": "-C"}


def render_numactl_hardware(profile: Profile, free_fraction: float = 0.93) -> str:
    nodes = profile.numa_nodes
    lines = [f"available: {len(nodes)} nodes (0-{len(nodes) - 1})"]
    for node in nodes:
        lines.append(f"node {node.node_id} cpus: {' '.join(str(cpu) for cpu in node.cpus)}")
        lines.append(f"node {node.node_id} size: {node.memory_mb} MB")
        lines.append(f"node {node.node_id} free: {int(node.memory_mb * free_fraction)} MB")
    lines.append("node distances:")
    lines.append("node " + "".join(f"{node.node_id:>3} " for node in nodes))
    for node, row in zip(nodes, profile.numa_distances, strict=True):
        lines.append(f"{node.node_id:>3}: " + "".join(f"{distance:>3} " for distance in row))
    return "\n".join(lines) + "\n"


def parse_id_list(text: str, limit: int) -> list[int] | None:
    """'0', '0,2', '0-3' or 'all' -> ids, or None when an id is malformed or not below `limit`."""
    if text == "all":
        return list(range(limit))
    ids = []
    for part in text.split(","):
        low, _, high = part.partition("-")
        if not low.isdigit() or (high and not high.isdigit()):
            return None
        ids += list(range(int(low), int(high or low) + 1))
    return ids if ids and all(i < limit for i in ids) else None


def numactl(argv: list[str], root: str) -> int:
    profile = get_profile(sim_state.load(root)["profile"])
    if argv and argv[0] in ("-H", "--hardware"):
        sys.stdout.write(render_numactl_hardware(profile))
        return 0

    index = 0
    while index < len(argv) and argv[index].startswith("-"):
        option = argv[index]
        name, has_value, value = option.partition("=")
        if name in ("-l", "--localalloc", "-a", "--all"):
            index += 1
            continue
        short_of = {**NODE_OPTIONS, **CPU_OPTIONS}
        if name not in short_of and name not in short_of.values():
            sys.stderr.write(f"numactl: unrecognized option '{option}'\n{NUMACTL_USAGE}")
            return 1
        if not has_value:
            if index + 1 >= len(argv):
                sys.stderr.write(NUMACTL_USAGE)
                return 1
            value = argv[index + 1]
            index += 1
        index += 1
        is_cpu_option = name in CPU_OPTIONS or name in CPU_OPTIONS.values()
        limit = profile.cpu_count if is_cpu_option else len(profile.numa_nodes)
        if parse_id_list(value, limit) is None:
            if not is_cpu_option:
                sys.stderr.write(f"libnuma: Warning: node argument {value} is out of range\n\n")
            sys.stderr.write(f"<{value}> is invalid\n{NUMACTL_USAGE}")
            return 1

    command = argv[index:]
    if not command:
        sys.stderr.write(NUMACTL_USAGE)
        return 1
    try:
        # Like numactl itself: replace this process with the command (an argv list, never a shell).
        os.execvp(command[0], command)  # noqa: S606
    except OSError as error:
        sys.stderr.write(f"numactl: execution of `{command[0]}': {error.strerror}\n")
        return 1
    return 0  # not reached: exec replaced this process


# --- uname -----------------------------------------------------------------------------------------

UNAME_FIELDS = "snrvmpio"  # the order uname prints them in, whatever order the flags came in
UNAME_LONG = {
    "--kernel-name": "s",
    "--nodename": "n",
    "--kernel-release": "r",
    "--kernel-version": "v",
    "--machine": "m",
    "--processor": "p",
    "--hardware-platform": "i",
    "--operating-system": "o",
    "--all": "a",
}


def uname(argv: list[str], root: str) -> int:
    """The sim host's kernel and machine, so facts read from commands agree with its files."""
    state = sim_state.load(root)
    profile = get_profile(state["profile"])
    values = {
        "s": "Linux",
        "n": state["node_name"],
        "r": profile.kernel,
        "v": "#1 SMP Wed Jun 28 12:00:00 CST 2023",
        "m": "aarch64",
        "p": "aarch64",
        "i": "aarch64",
        "o": "GNU/Linux",
    }
    wanted = set()
    for option in argv:
        letters = UNAME_LONG.get(option) or (option[1:] if option.startswith("-") and option[1:] else None)
        if letters is None or any(letter not in values and letter != "a" for letter in letters):
            print(f"uname: invalid option -- '{option.lstrip('-')}'", file=sys.stderr)
            return 1
        wanted |= set(UNAME_FIELDS) if "a" in letters else set(letters)
    print(" ".join(values[field] for field in UNAME_FIELDS if field in (wanted or {"s"})))
    return 0
