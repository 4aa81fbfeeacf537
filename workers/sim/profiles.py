"""Hardware profiles of the simulated Ascend hosts: which NPUs, chips, CPUs and versions each one has.

The figures follow what real hosts of each model print (see the npu-smi samples described in
/work/shared/ascend-samples/INDEX.md); they are composed here, not copied.
"""

from dataclasses import dataclass
from typing import TypedDict

FAMILY_910B = "910B"  # Atlas 800I A2: one chip per NPU, HBM
FAMILY_310P = "310P"  # Atlas 300I Pro / Duo: DDR only, power NA in the table
FAMILY_910_93 = "910_93"  # Atlas 800 A3: two dies per NPU, `Chip Phy-ID` column


@dataclass(frozen=True)
class Chip:
    npu_id: int
    chip_id: int
    logic_id: int
    phy_id: int
    bus_id: str  # as npu-smi prints it: 0000:C1:00.0
    numa_node: int
    memory_total_mb: int  # HBM on 910 families, DDR on 310P
    memory_base_mb: int  # what the driver and runtime hold with nothing running

    @property
    def sysfs_bus_id(self) -> str:
        return self.bus_id.lower()


@dataclass(frozen=True)
class NumaNode:
    node_id: int
    first_cpu: int
    cpu_count: int
    memory_mb: int

    @property
    def cpulist(self) -> str:
        return f"{self.first_cpu}-{self.first_cpu + self.cpu_count - 1}"

    @property
    def cpus(self) -> list[int]:
        return list(range(self.first_cpu, self.first_cpu + self.cpu_count))


@dataclass(frozen=True)
class Profile:
    name: str
    product: str  # the server or card model
    family: str
    chip_name: str  # the table's Name column
    npu_name: str  # A3 only: `NPU Name` of -t board (SoC suffix)
    chips: tuple[Chip, ...]
    has_mcu: bool
    idle_power_w: float  # per NPU; 310P cards report it through the MCU only
    max_power_w: float
    idle_temp_c: int
    aicore_count: int
    aicore_freq_mhz: int
    pci_device_id: str
    board_id: str
    npu_smi_version: str
    driver_version: str
    firmware_version: str
    cann_version: str
    numa_nodes: tuple[NumaNode, ...]
    sockets: int
    numa_distances: tuple[tuple[int, ...], ...]
    os_id: str  # key into OS_RELEASES
    kernel: str
    default_node_name: str

    @property
    def has_hbm(self) -> bool:
        return self.family != FAMILY_310P

    @property
    def npu_ids(self) -> list[int]:
        seen: list[int] = []
        for chip in self.chips:
            if chip.npu_id not in seen:
                seen.append(chip.npu_id)
        return seen

    def chips_of(self, npu_id: int) -> list[Chip]:
        return [chip for chip in self.chips if chip.npu_id == npu_id]

    def chip_by_logic_id(self, logic_id: int) -> Chip:
        for chip in self.chips:
            if chip.logic_id == logic_id:
                return chip
        raise KeyError(f"logic id {logic_id} does not exist on profile {self.name}")

    def mcu_chip_id(self, npu_id: int) -> int:
        # The MCU is listed after the compute chips of its NPU.
        return len(self.chips_of(npu_id))

    @property
    def cpu_count(self) -> int:
        return sum(node.cpu_count for node in self.numa_nodes)

    @property
    def memory_mb(self) -> int:
        return sum(node.memory_mb for node in self.numa_nodes)


# Kunpeng 920 numbers its PCIe root ports per die; the bus number's top bits pick the NUMA node.
def _numa_of_bus(bus: int, node_count: int) -> int:
    return bus * node_count // 256


def _four_nodes(cpus_per_node: int, memory_mb: int) -> tuple[NumaNode, ...]:
    return tuple(NumaNode(n, n * cpus_per_node, cpus_per_node, memory_mb) for n in range(4))


# Two sockets, two dies each: near die 12, far socket 20/22/24 (as numactl -H prints on Kunpeng 920).
KUNPENG_2P_DISTANCES = ((10, 12, 20, 22), (12, 10, 22, 24), (20, 22, 10, 12), (22, 24, 12, 10))


def _kunpeng_4p_distances() -> tuple[tuple[int, ...], ...]:
    rows = []
    for a in range(8):
        row = []
        for b in range(8):
            if a == b:
                row.append(10)
            elif a // 2 == b // 2:
                row.append(12)
            else:
                row.append(20 + 2 * (a % 2 != b % 2))
        rows.append(tuple(row))
    return tuple(rows)


# What the A2, 300I Pro and Duo hosts run: one HDK 24.1 / CANN 8.0 stack on a two-socket Kunpeng 920.
class _Stack(TypedDict):
    """The Ascend software a profile's host carries (Profile's fields of the same names)."""

    npu_smi_version: str
    driver_version: str
    firmware_version: str
    cann_version: str


class _Host(TypedDict):
    sockets: int
    numa_distances: tuple[tuple[int, ...], ...]


HDK_24_1_STACK: _Stack = {
    "npu_smi_version": "24.1.rc2",
    "driver_version": "24.1.rc2",
    "firmware_version": "7.5.0.1.129",
    "cann_version": "8.0.RC3",
}
KUNPENG_2P_HOST: _Host = {"sockets": 2, "numa_distances": KUNPENG_2P_DISTANCES}


def _atlas_800i_a2() -> Profile:
    buses = [0xC1, 0x01, 0xC2, 0x02, 0x81, 0x41, 0x82, 0x42]
    base = [3340, 3334, 3336, 3335, 3334, 3337, 3335, 3336]
    chips = tuple(
        Chip(npu, 0, npu, npu, f"0000:{bus:02X}:00.0", _numa_of_bus(bus, 4), 65536, base[npu])
        for npu, bus in enumerate(buses)
    )
    return Profile(
        name="atlas-800i-a2",
        product="Atlas 800I A2",
        family=FAMILY_910B,
        chip_name="910B3",
        npu_name="",
        chips=chips,
        has_mcu=True,
        idle_power_w=92.0,
        max_power_w=310.0,
        idle_temp_c=44,
        aicore_count=20,
        aicore_freq_mhz=1800,
        pci_device_id="0xD802",
        board_id="0x33",
        **HDK_24_1_STACK,
        numa_nodes=_four_nodes(32, 257_024),
        **KUNPENG_2P_HOST,
        os_id="openeuler-22.03-sp1",
        kernel="5.10.0-136.12.0.86.oe2203sp1.aarch64",
        default_node_name="ascend-a2-01",
    )


def _atlas_300i_pro() -> Profile:
    # Sparse NPU ids are what 300I cards get on Kunpeng hosts; the parser must not assume 0..n-1.
    layout = [(0, 0x01), (32, 0x02), (32768, 0x81), (32800, 0x82)]
    chips = tuple(
        Chip(npu, 0, logic, logic, f"0000:{bus:02X}:00.0", _numa_of_bus(bus, 4), 21527, 1848 + logic)
        for logic, (npu, bus) in enumerate(layout)
    )
    return Profile(
        name="atlas-300i-pro",
        product="Atlas 300I Pro",
        family=FAMILY_310P,
        chip_name="310P3",
        npu_name="",
        chips=chips,
        has_mcu=True,
        idle_power_w=18.5,
        max_power_w=72.0,
        idle_temp_c=42,
        aicore_count=8,
        aicore_freq_mhz=1080,
        pci_device_id="0xD500",
        board_id="0x64",
        **HDK_24_1_STACK,
        numa_nodes=_four_nodes(32, 128_512),
        **KUNPENG_2P_HOST,
        os_id="kylin-v10-sp2",
        kernel="4.19.90-24.4.v2101.ky10.aarch64",
        default_node_name="ascend-300ipro-01",
    )


def _atlas_300i_duo() -> Profile:
    # Each Duo card carries two 310P3 chips behind one PCIe function, with unequal DDR sizes.
    cards = [(1, 0x01), (2, 0x81)]
    chips = []
    for card_index, (npu, bus) in enumerate(cards):
        for chip_id, (total, base) in enumerate([(44280, 1529), (43693, 1411)]):
            logic = card_index * 2 + chip_id
            bus_id = f"0000:{bus:02X}:00.0"
            chips.append(Chip(npu, chip_id, logic, logic, bus_id, _numa_of_bus(bus, 4), total, base))
    return Profile(
        name="atlas-300i-duo",
        product="Atlas 300I Duo",
        family=FAMILY_310P,
        chip_name="310P3",
        npu_name="",
        chips=tuple(chips),
        has_mcu=True,
        idle_power_w=45.2,
        max_power_w=150.0,
        idle_temp_c=49,
        aicore_count=8,
        aicore_freq_mhz=1080,
        pci_device_id="0xD500",
        board_id="0x65",
        **HDK_24_1_STACK,
        numa_nodes=_four_nodes(32, 128_512),
        **KUNPENG_2P_HOST,
        os_id="kylin-v10-sp2",
        kernel="4.19.90-24.4.v2101.ky10.aarch64",
        default_node_name="ascend-300iduo-01",
    )


def _atlas_800_a3() -> Profile:
    chips = []
    for npu in range(8):
        bus0 = 0x09 + npu * 0x20
        for die in range(2):
            logic = npu * 2 + die
            bus = bus0 + 2 * die
            base = 3133 if die == 0 else 2876
            chips.append(Chip(npu, die, logic, logic, f"0000:{bus:02X}:00.0", npu, 65536, base + npu))
    return Profile(
        name="atlas-800-a3",
        product="Atlas 800 A3",
        family=FAMILY_910_93,
        chip_name="Ascend910",
        npu_name="9382",
        chips=tuple(chips),
        has_mcu=False,
        idle_power_w=165.0,
        max_power_w=560.0,
        idle_temp_c=37,
        aicore_count=24,
        aicore_freq_mhz=1800,
        pci_device_id="0xD803",
        board_id="0xb0",
        npu_smi_version="25.2.0",
        driver_version="25.2.0",
        firmware_version="7.7.0.6.236",
        cann_version="8.2.RC1",
        numa_nodes=tuple(NumaNode(n, n * 40, 40, 257_024) for n in range(8)),
        sockets=4,
        numa_distances=_kunpeng_4p_distances(),
        os_id="openeuler-22.03-sp1",
        kernel="5.10.0-136.12.0.86.oe2203sp1.aarch64",
        default_node_name="ascend-a3-01",
    )


PROFILES: dict[str, Profile] = {
    profile.name: profile
    for profile in (_atlas_800i_a2(), _atlas_300i_pro(), _atlas_300i_duo(), _atlas_800_a3())
}


def get_profile(name: str) -> Profile:
    try:
        return PROFILES[name]
    except KeyError:
        known = ", ".join(sorted(PROFILES))
        raise ValueError(f"unknown sim profile {name!r}; choose one of: {known}") from None


OS_RELEASES = {
    "openeuler-22.03-sp1": {
        "NAME": "openEuler",
        "VERSION": "22.03 (LTS-SP1)",
        "ID": "openEuler",
        "VERSION_ID": "22.03",
        "PRETTY_NAME": "openEuler 22.03 (LTS-SP1)",
        "ANSI_COLOR": "0;31",
    },
    "kylin-v10-sp2": {
        "NAME": "Kylin Linux Advanced Server",
        "VERSION": "V10 (Sword)",
        "ID": "kylin",
        "VERSION_ID": "V10",
        "PRETTY_NAME": "Kylin Linux Advanced Server V10 (Sword)",
        "ANSI_COLOR": "0;31",
    },
}
