"""Text of `npu-smi info` in the layouts the real tool prints, built from chip readings.

Two table layouts exist: the 98-column one of 910B / 910_93 (HBM column; A3 adds `Chip Phy-ID`) and
the 106-column one of 310P (`Chip Device`, Memory only, power NA). Column widths follow the real
tool's printf formats, so a parser that works here works on a real host.
"""

from workers.sim.profiles import FAMILY_310P, FAMILY_910_93, FAMILY_910B, Profile
from workers.sim.readings import ChipReading, mcu_power_w, mcu_temperature_c

# --- 910B / 910_93: 98 columns -------------------------------------------------------------------
WIDE_COLUMNS = (27, 15, 52)
# --- 310P: 106 columns ---------------------------------------------------------------------------
CARD_COLUMNS = (31, 17, 54)


def _rule(columns: tuple[int, ...], fill: str) -> str:
    return "+" + "+".join(fill * width for width in columns) + "+"


def _full_rule(columns: tuple[int, ...]) -> str:
    return "+" + "-" * (sum(columns) + len(columns) - 1) + "+"


def _message_row(columns: tuple[int, ...], text: str) -> str:
    inner = sum(columns) + len(columns) - 1
    return "|" + f" {text}".ljust(inner) + "|"


def render_table(profile: Profile, readings: list[ChipReading]) -> str:
    if profile.family == FAMILY_310P:
        return _render_card_table(profile, readings)
    return _render_wide_table(profile, readings)


def _render_wide_table(profile: Profile, readings: list[ChipReading]) -> str:
    columns = WIDE_COLUMNS
    version = profile.npu_smi_version
    is_a3 = profile.family == FAMILY_910_93
    chip_header = f"{'Chip':<5} {'Phy-ID':<20}" if is_a3 else f"{'Chip':<26}"
    lines = [
        _full_rule(columns),
        f"| npu-smi {version:<24} Version: {version:<52} |",
        _rule(columns, "-"),
        f"| {'NPU':<5} {'Name':<20}| {'Health':<13} | "
        f"{'Power(W)':<11} {'Temp(C)':<17} Hugepages-Usage(page)|",
        f"| {chip_header}| {'Bus-Id':<13} | "
        f"{'AICore(%)':<11} {'Memory-Usage(MB)':<17} {'HBM-Usage(MB)':<21}|",
        _rule(columns, "="),
    ]
    for npu_id in profile.npu_ids:
        chips = [r for r in readings if r.chip.npu_id == npu_id]
        if not chips:  # every chip of it fell off the bus: npu-smi does not list it
            continue
        for index, reading in enumerate(chips):
            if index:
                lines.append(_full_rule(columns))
            chip = reading.chip
            power = "-" if reading.power_w is None else f"{reading.power_w:.1f}"
            lines.append(
                f"| {npu_id:<5} {profile.chip_name:<20}| {reading.health:<13} | "
                f"{power:<11} {reading.temperature_c:<17} {0:<5}/ {0:<13} |"
            )
            chip_cell = f"{chip.chip_id:<5} {chip.phy_id:<20}" if is_a3 else f"{chip.chip_id:<26}"
            # 910B and A3 print DDR as 0 / 0; the device memory is the HBM pair.
            lines.append(
                f"| {chip_cell}| {chip.bus_id:<13} | {reading.aicore_percent:<11} "
                f"{0:<5}/ {0:<10} {reading.memory_used_mb:<5}/ {chip.memory_total_mb:<13} |"
            )
        lines.append(_rule(columns, "="))

    lines += _process_table(profile, readings, columns, 18, 13, 23)
    return "\n".join(lines) + "\n"


def _render_card_table(profile: Profile, readings: list[ChipReading]) -> str:
    columns = CARD_COLUMNS
    version = profile.npu_smi_version
    lines = [
        _full_rule(columns),
        f"| npu-smi {version:<40} Version: {version:<44} |",
        _rule(columns, "-"),
        f"| {'NPU':<7} {'Name':<22}| {'Health':<15} | {'Power(W)':<12} {'Temp(C)':<17} "
        f"{'Hugepages-Usage(page)':<21} |",
        f"| {'Chip':<7} {'Device':<22}| {'Bus-Id':<15} | {'AICore(%)':<12} {'Memory-Usage(MB)':<39} |",
        _rule(columns, "="),
    ]
    for npu_id in profile.npu_ids:
        chips = [r for r in readings if r.chip.npu_id == npu_id]
        if not chips:  # every chip of it fell off the bus: npu-smi does not list it
            continue
        for index, reading in enumerate(chips):
            if index:
                lines.append(_rule(columns, "-"))
            chip = reading.chip
            # 310P reports power per card through the MCU; the table always shows NA.
            lines.append(
                f"| {npu_id:<7} {profile.chip_name:<22}| {reading.health:<15} | "
                f"{'NA':<12} {reading.temperature_c:<17} {0:<6}/ {0:<13} |"
            )
            lines.append(
                f"| {chip.chip_id:<7} {chip.logic_id:<22}| {chip.bus_id:<15} | {reading.aicore_percent:<12} "
                f"{reading.memory_used_mb:<5}/ {chip.memory_total_mb:<32} |"
            )
        lines.append(_rule(columns, "="))

    lines += _process_table(profile, readings, columns, 22, 15, 25)
    return "\n".join(lines) + "\n"


def _process_table(
    profile: Profile,
    readings: list[ChipReading],
    columns: tuple[int, ...],
    chip_w: int,
    pid_w: int,
    memory_w: int,
) -> list[str]:
    """The process section under the NPU table; each table kind has its own column widths."""
    lines = [
        _rule(columns, "-"),
        f"| {'NPU':<7} {'Chip':<{chip_w}}| {'Process id':<{pid_w}} | "
        f"{'Process name':<24} | {'Process memory(MB)':<{memory_w}} |",
        _rule(columns, "="),
    ]
    listed = {r.chip.npu_id for r in readings}
    for npu_id in [npu for npu in profile.npu_ids if npu in listed]:
        rows = [
            f"| {npu_id:<7} {r.chip.chip_id:<{chip_w}}| {p.pid:<{pid_w}} | "
            f"{p.name:<24} | {p.memory_mb:<{memory_w}} |"
            for r in readings
            if r.chip.npu_id == npu_id
            for p in r.processes
        ]
        lines += rows or [_message_row(columns, f"No running processes found in NPU {npu_id:<7}")]
        lines.append(_rule(columns, "="))
    return lines


def render_mapping(profile: Profile) -> str:
    """`npu-smi info -m`: one row per chip, plus an Mcu row (logic id `-`) where the card has one."""
    lines = []
    if profile.family == FAMILY_910_93:
        header = ("NPU ID", "Chip ID", "Chip Logic ID", "Chip Phy-ID", "Chip Name")
        lines.append("\t" + " ".join(f"{title:<30}" for title in header))
        for chip in profile.chips:
            ids = (chip.npu_id, chip.chip_id, chip.logic_id, chip.phy_id)
            lines.append("\t" + " ".join(f"{value:<30}" for value in ids) + f" {profile.chip_name}")
        return "\n".join(lines) + "\n"

    lines.append(f"\t{'NPU ID':<30} {'Chip ID':<30} {'Chip Logic ID':<30} {'Chip Name':<30}")
    for npu_id in profile.npu_ids:
        for chip in profile.chips_of(npu_id):
            lines.append(f"\t{npu_id:<30} {chip.chip_id:<30} {chip.logic_id:<30} Ascend {profile.chip_name}")
        if profile.has_mcu:
            lines.append(f"\t{npu_id:<30} {profile.mcu_chip_id(npu_id):<30} {'-':<30} {'Mcu':<30}")
    return "\n".join(lines) + "\n"


def kv(key: str, value) -> str:
    return f"\t{key:<30} : {value}"


def render_list(profile: Profile, serial_numbers: dict[int, str]) -> str:
    """`npu-smi info -l`. Servers of the 910 family do not print product name and serial number."""
    lines = [kv("Total Count", len(profile.npu_ids)), ""]
    for npu_id in profile.npu_ids:
        lines.append(kv("NPU ID", npu_id))
        if profile.family == FAMILY_310P:
            lines.append(kv("Product Name", profile.product))
            lines.append(kv("Serial Number", serial_numbers[npu_id]))
        lines.append(kv("Chip Count", len(profile.chips_of(npu_id))))
        lines.append("")
    return "\n".join(lines) + "\n"


def _usage_fields(profile: Profile, reading: ChipReading) -> list[str]:
    used, total = reading.memory_used_mb, reading.chip.memory_total_mb
    rate = used * 100 // total
    busy = reading.aicore_percent
    if profile.family == FAMILY_310P:
        return [
            kv("DDR Capacity(MB)", total),
            kv("DDR Usage Rate(%)", rate),
            kv("DDR Hugepages Total(page)", 0),
            kv("DDR Hugepages Usage Rate(%)", 0),
            kv("Aicore Usage Rate(%)", busy),
            kv("Aicpu Usage Rate(%)", 0),
            kv("Ctrlcpu Usage Rate(%)", 2 + busy // 20),
            kv("Vectorcore Usage Rate(%)", busy // 3),
            kv("DDR Bandwidth Usage Rate(%)", busy // 2),
            kv("DVPP VDEC Usage Rate(%)", 0),
            kv("DVPP VPC Usage Rate(%)", 0),
            kv("DVPP VENC Usage Rate(%)", 0),
            kv("DVPP JPEGE Usage Rate(%)", 0),
            kv("DVPP JPEGD Usage Rate(%)", 0),
        ]
    return [
        kv("DDR Capacity(MB)", 0),
        kv("DDR Usage Rate(%)", 0),
        kv("DDR Hugepages Total(page)", 0),
        kv("DDR Hugepages Usage Rate(%)", 0),
        kv("HBM Capacity(MB)", total),
        kv("HBM Usage Rate(%)", rate),
        kv("Aicore Usage Rate(%)", busy),
        kv("Aivector Usage Rate(%)", busy // 2),
        kv("Aicpu Usage Rate(%)", 0),
        kv("Ctrlcpu Usage Rate(%)", 1 + busy // 25),
        kv("DDR Bandwidth Usage Rate(%)", 0),
        kv("HBM Bandwidth Usage Rate(%)", busy * 3 // 4),
        kv("NPU Utilization(%)", busy),
        kv("Aicube Usage Rate(%)", busy),
    ]


def _common_fields(profile: Profile, reading: ChipReading) -> list[str]:
    rate = reading.memory_used_mb * 100 // reading.chip.memory_total_mb
    busy_freq = profile.aicore_freq_mhz if reading.load > 0 else profile.aicore_freq_mhz * 8 // 9
    if profile.family == FAMILY_310P:
        return [
            kv("Memory Usage Rate(%)", rate),
            kv("Aicore Usage Rate(%)", reading.aicore_percent),
            kv("Aicore Freq(MHZ)", profile.aicore_freq_mhz),
            kv("Aicore curFreq(MHZ)", busy_freq),
            kv("Temperature(C)", reading.temperature_c),
        ]
    power = "NA" if reading.power_w is None else f"{reading.power_w:.1f}"
    return [
        kv("Memory Usage Rate(%)", 0),
        kv("HBM Usage Rate(%)", rate),
        kv("Aicore Usage Rate(%)", reading.aicore_percent),
        kv("Aicore Freq(MHZ)", profile.aicore_freq_mhz),
        kv("Aicore curFreq(MHZ)", busy_freq),
        kv("Aicore Count", profile.aicore_count),
        kv("Temperature(C)", reading.temperature_c),
        kv("NPU Real-time Power(W)", power),
    ]


def _memory_fields(profile: Profile, reading: ChipReading) -> list[str]:
    if profile.family == FAMILY_310P:
        return [kv("DDR Capacity(MB)", reading.chip.memory_total_mb), kv("DDR Clock Speed(MHz)", 3200)]
    return [
        kv("DDR Capacity(MB)", 0),
        kv("DDR Clock Speed(MHz)", 0),
        kv("HBM Capacity(MB)", reading.chip.memory_total_mb),
        kv("HBM Clock Speed(MHz)", 1600),
        kv("HBM Temperature(C)", reading.temperature_c + 3),
        kv("HBM Manufacturer ID", "0x56"),
    ]


def _power_fields(profile: Profile, reading: ChipReading) -> list[str]:
    power = "NA" if reading.power_w is None else f"{reading.power_w:.1f}"
    return [kv("NPU Real-time Power(W)", power)]


def _temp_fields(profile: Profile, reading: ChipReading) -> list[str]:
    # Cards (300I) say `Temperature (C)`; server boards (A2, A3) say `NPU Temperature (C)`.
    key = "Temperature (C)" if profile.family == FAMILY_310P else "NPU Temperature (C)"
    return [kv(key, reading.temperature_c)]


# -t types whose chip blocks end with `Chip ID` (usages, memory, power, temp).
TRAILING_CHIP_ID_FIELDS = {
    "usages": _usage_fields,
    "memory": _memory_fields,
    "power": _power_fields,
    "temp": _temp_fields,
}


def render_chip_blocks(profile: Profile, kind: str, chips: list[ChipReading], npu_id: int) -> str:
    lines = [kv("NPU ID", npu_id), kv("Chip Count", len(profile.chips_of(npu_id)))]
    for reading in chips:
        lines.append("")
        lines += TRAILING_CHIP_ID_FIELDS[kind](profile, reading)
        lines.append(kv("Chip ID", reading.chip.chip_id))
    return "\n".join(lines) + "\n"


def render_common(
    profile: Profile, readings: list[ChipReading], chips: list[ChipReading], npu_id: int
) -> str:
    """`-t common`: blocks start with `Chip ID`, then an MCU block without one."""
    lines = [kv("NPU ID", npu_id), kv("Chip Count", len(profile.chips_of(npu_id)))]
    for reading in chips:
        lines += ["", kv("Chip ID", reading.chip.chip_id)]
        lines += _common_fields(profile, reading)
    if profile.has_mcu:
        lines += [
            "",
            kv("Chip Name", "mcu"),
            kv("Temperature(C)", mcu_temperature_c(profile, readings, npu_id)),
            kv("NPU Real-time Power(W)", f"{mcu_power_w(profile, readings, npu_id):.1f}"),
        ]
    return "\n".join(lines) + "\n"


# What npu-smi -t health shows for an injected health fault: a real code of that severity and the meaning
# Huawei's fault definitions give it (workers.ascend.npu_fault_codes has the table and its sources).
FAULT_CODES = {
    "Warning": ("80E18401", "HBM multi-bit ECC isolated rows reached 16"),
    "Alarm": ("80C98000", "AI Core instruction data check failed"),
    "Critical": ("80E18402", "HBM multi-bit ECC isolated rows reached 64"),
}
# What it shows of an ECC burst on a chip whose health word is otherwise OK.
ECC_BURST_CODE = ("80E18400", "HBM multi-bit ECC error in user memory, the row is isolated")


def render_health(reading: ChipReading, injected: str = "") -> str:
    """`-t health` of a chip; `injected` is the health fault set on it (the word may come from ECC alone)."""
    health = reading.health
    if health == "OK":
        code, information = "NA", "NA"
    elif injected in ("", "OK"):
        code, information = ECC_BURST_CODE
    else:
        code, information = FAULT_CODES[health]
    lines = [
        kv("Health Status", health),
        kv("Error Code", code),
        kv("Error Information", information),
    ]
    return "\n".join(lines) + "\n"


def render_gone_health() -> str:
    """A chip that fell off the bus: npu-smi reads its state as UNKNOWN (the device does not exist)."""
    return (
        "\n".join([kv("Health Status", "UNKNOWN"), kv("Error Code", "NA"), kv("Error Information", "NA")])
        + "\n"
    )


def kv40(key: str, value) -> str:
    return f"\t{key:<40} : {value}"


def render_ecc(profile: Profile, npu_id: int, chips: list[tuple[int, dict]]) -> str:
    """`npu-smi info -t ecc -i N`: per chip the DDR pair (0 on HBM chips) and the HBM counters; 310P has
    DDR only."""
    lines = [kv40("NPU ID", npu_id), kv40("Chip Count", len(profile.chips_of(npu_id)))]
    for chip_id, counts in chips:
        lines.append("")
        if profile.family == FAMILY_310P:
            lines += [
                kv40("DDR Single Bit Error Count", counts["hbm_single"]),
                kv40("DDR Double Bit Error Count", counts["hbm_double"]),
                kv40("DDR Single Bit Aggregate Total Err Cnt", counts["hbm_single_total"]),
                kv40("DDR Double Bit Aggregate Total Err Cnt", counts["hbm_double_total"]),
                kv40("DDR Single Bit Isolated Pages Count", 0),
                kv40("DDR Double Bit Isolated Pages Count", counts["hbm_double_isolated_pages"]),
            ]
        else:
            lines += [
                kv40("DDR Single Bit Error Count", 0),
                kv40("DDR Double Bit Error Count", 0),
                kv40("HBM Single Bit Error Count", counts["hbm_single"]),
                kv40("HBM Double Bit Error Count", counts["hbm_double"]),
                kv40("HBM Single Bit Aggregate Total Err Cnt", counts["hbm_single_total"]),
                kv40("HBM Double Bit Aggregate Total Err Cnt", counts["hbm_double_total"]),
                kv40("HBM Single Bit Isolated Pages Count", 0),
                kv40("HBM Double Bit Isolated Pages Count", counts["hbm_double_isolated_pages"]),
            ]
        lines.append(kv40("Chip ID", chip_id))
    return "\n".join(lines) + "\n"


def _die_id(npu_id: int, chip_id: int, salt: int) -> str:
    """Five stable 32-bit words per die, distinct per chip, like the fused die ids the tool prints."""
    start = 0x901421D4 + npu_id * 0x10000F3 + chip_id * 0x77 + salt * 0x3131
    words = [(start + i * 0x01020304) & 0xFFFFFFFF for i in range(5)]
    return " ".join(f"{word:08X}" for word in words)


def render_board(profile: Profile, npu_id: int, chip_id: int | None) -> str:
    chips = profile.chips_of(npu_id)
    if chip_id is None:
        lines = [
            kv("NPU ID", npu_id),
            kv("Software Version", profile.driver_version),
            kv("Firmware Version", profile.firmware_version),
            kv("Compatibility", "OK"),
            kv("Board ID", profile.board_id),
            kv("PCB ID", "A"),
            kv("BOM ID", 1),
            kv("PCIe Bus Info", chips[0].bus_id),
            kv("Slot ID", profile.npu_ids.index(npu_id)),
            kv("Class ID", "NA"),
            kv("PCI Vendor ID", "0x19E5"),
            kv("PCI Device ID", profile.pci_device_id),
            kv("Subsystem Vendor ID", "0x0200"),
            kv("Subsystem Device ID", "0x0100"),
            kv("Chip Count", len(chips)),
        ]
        return "\n".join(lines) + "\n"

    chip = next(c for c in chips if c.chip_id == chip_id)
    # One chip per board on 910B servers: the position is the board's slot; on cards, the chip's place.
    position = profile.npu_ids.index(npu_id) if profile.family == FAMILY_910B else chip.chip_id
    lines = [kv("NPU ID", npu_id)]
    if profile.family == FAMILY_910_93:
        lines.append(kv("NPU Name", profile.npu_name))
    lines.append(kv("Chip ID", chip_id))
    if profile.family != FAMILY_910_93:
        lines.append(kv("Chip Type", "Ascend"))
    lines += [kv("Chip Name", profile.chip_name), kv("Chip Version", "V1"), kv("Board ID", profile.board_id)]
    if profile.family == FAMILY_310P:
        lines.append(kv("Die ID", _die_id(npu_id, chip_id, 0)))
    else:
        lines += [
            kv("PCB ID", "NA"),
            kv("BOM ID", 1),
            kv("VDie ID", _die_id(npu_id, chip_id, 1)),
            kv("NDie ID", _die_id(npu_id, chip_id, 2)),
        ]
    lines += [
        kv("Chip Position ID", position),
        kv("PCIe Bus Info", chip.bus_id),
        kv("Firmware Version", profile.firmware_version),
    ]
    return "\n".join(lines) + "\n"


# --- -t topo ---------------------------------------------------------------------------------------
TOPO_LEGEND = (
    ("X", "Self"),
    ("SYS", "Across PCIe and the interconnect between NUMA nodes"),
    ("PHB", "Across PCIe and a PCIe host bridge"),
    ("PIX", "Across at most one PCIe bridge"),
    ("HCCS", "Across HCCS"),
    ("SIO", "Across SIO, between the two dies of one NPU"),
    ("NA", "Unknown"),
)


def _link(profile: Profile, a, b) -> str:
    if a == b:
        return "X"
    if profile.family == FAMILY_910_93 and a.npu_id == b.npu_id:
        return "SIO"
    if profile.family in (FAMILY_910B, FAMILY_910_93):
        return "HCCS"  # a full HCCS mesh on the Atlas 800 (I) A2 / A3 boards
    if a.npu_id == b.npu_id:
        return "PIX"  # the two chips of one 310P Duo card share its PCIe switch
    return "PHB" if a.numa_node == b.numa_node else "SYS"


def render_topo(profile: Profile) -> str:
    """The link matrix of `npu-smi info -t topo`: one row and column per chip, with each chip's CPUs
    (its NUMA node's) last, except on A3 whose dies have no single NUMA node and print no affinity."""
    prefix = "Phy-ID" if profile.family == FAMILY_910_93 else "NPU"
    chips = list(profile.chips)
    names = [f"{prefix}{chip.phy_id}" for chip in chips]
    width = max(len(n) for n in names) + 4
    affinity = profile.family != FAMILY_910_93
    cpus = {node.node_id: node.cpulist for node in profile.numa_nodes}
    header = " " * width + "".join(n.ljust(width) for n in names) + ("CPU Affinity" if affinity else "")
    lines = [header.rstrip()]
    for name, chip in zip(names, chips, strict=True):
        cells = "".join(_link(profile, chip, other).ljust(width) for other in chips)
        tail = cpus.get(chip.numa_node, "") if affinity else ""
        lines.append((name.ljust(width) + cells + tail).rstrip())
    lines += ["", "Legend:", ""]
    lines += [f"  {key:<5}= {meaning}" for key, meaning in TOPO_LEGEND]
    return "\n".join(lines) + "\n"
