import re
from pathlib import Path

import pytest

from tests.unit.fake_runner import FakeResult, FakeRunner
from workers.ascend.facts import (
    PYTHON_COMMANDS,
    PYTHON_PROBE,
    collect_host_facts,
    npu_numa_nodes,
    parse_cpuinfo,
    parse_df,
    parse_hugepage_dirs,
    parse_lscpu,
    parse_meminfo,
    parse_numa_cpulist,
    parse_os_release,
    parse_uname,
    sysfs_bus_id,
)

# Composed from the documented formats of each file / command; the numbers describe an Atlas 800I A2
# (4 x Kunpeng 920, 8 NUMA nodes) unless a test says otherwise.
OPENEULER = """NAME="openEuler"
VERSION="22.03 (LTS-SP1)"
ID="openEuler"
VERSION_ID="22.03"
PRETTY_NAME="openEuler 22.03 (LTS-SP1)"
ANSI_COLOR="0;31"
"""
KYLIN = """NAME="Kylin Linux Advanced Server"
VERSION="V10 (Lance)"
ID="kylin"
VERSION_ID="V10"
PRETTY_NAME="Kylin Linux Advanced Server V10 (Lance)"
ANSI_COLOR="0;31"
"""
UBUNTU = """PRETTY_NAME="Ubuntu 22.04.4 LTS"
NAME="Ubuntu"
VERSION_ID="22.04"
VERSION="22.04.4 LTS (Jammy Jellyfish)"
VERSION_CODENAME=jammy
ID=ubuntu
ID_LIKE=debian
"""
LSCPU_KUNPENG = """Architecture:                    aarch64
CPU op-mode(s):                  64-bit
Byte Order:                      Little Endian
CPU(s):                          192
On-line CPU(s) list:             0-191
Thread(s) per core:              1
Core(s) per socket:              48
Socket(s):                       4
NUMA node(s):                    8
Vendor ID:                       HiSilicon
Model:                           0
Model name:                      Kunpeng-920
Stepping:                        0x1
CPU max MHz:                     2600.0000
BogoMIPS:                        200.00
L1d cache:                       12 MiB
NUMA node0 CPU(s):               0-23
NUMA node1 CPU(s):               24-47
NUMA node2 CPU(s):               48-71
NUMA node3 CPU(s):               72-95
NUMA node4 CPU(s):               96-119
NUMA node5 CPU(s):               120-143
NUMA node6 CPU(s):               144-167
NUMA node7 CPU(s):               168-191
Flags:                           fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid
"""
# util-linux 2.37+ without root: nested keys, clusters instead of sockets, no model name table entry.
LSCPU_NESTED_NO_MODEL = """Architecture:           aarch64
  CPU op-mode(s):       64-bit
  Byte Order:           Little Endian
CPU(s):                 96
  On-line CPU(s) list:  0-95
Vendor ID:              HiSilicon
  Model name:           -
    Model:              0
    Thread(s) per core: 1
    Core(s) per cluster: 48
    Socket(s):          -
    Cluster(s):         2
NUMA:
  NUMA node(s):         4
  NUMA node0 CPU(s):    0-23
  NUMA node1 CPU(s):    24-47
  NUMA node2 CPU(s):    48-71
  NUMA node3 CPU(s):    72-95
"""
CPUINFO_KUNPENG = """processor\t: 0
BogoMIPS\t: 200.00
Features\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid
CPU implementer\t: 0x48
CPU architecture: 8
CPU variant\t: 0x1
CPU part\t: 0xd01
CPU revision\t: 0

processor\t: 1
BogoMIPS\t: 200.00
CPU implementer\t: 0x48
CPU architecture: 8
CPU variant\t: 0x1
CPU part\t: 0xd01
CPU revision\t: 0
"""
CPUINFO_X86 = """processor\t: 0
vendor_id\t: GenuineIntel
model name\t: Intel(R) Xeon(R) Gold 6348 CPU @ 2.60GHz

processor\t: 1
vendor_id\t: GenuineIntel
model name\t: Intel(R) Xeon(R) Gold 6348 CPU @ 2.60GHz
"""
MEMINFO = """MemTotal:       1056453348 kB
MemFree:        913113600 kB
MemAvailable:   998760448 kB
Buffers:           10240 kB
Active(anon):    4194304 kB
HugePages_Total:    1024
HugePages_Free:     1000
Hugepagesize:       2048 kB
"""
NODE0_MEMINFO = """Node 0 MemTotal:       131806100 kB
Node 0 MemFree:        120000000 kB
Node 0 MemUsed:         11806100 kB
Node 0 HugePages_Total:   512
"""
DF = """Filesystem                1-blocks         Used    Available Capacity Mounted on
/dev/mapper/openeuler-root 1099511627776 322122547200 777389080576      30% /
/dev/nvme0n1p1            7681501126656 2199023255552 5482477871104      29% /data
/dev/mapper/openeuler-root 1099511627776 322122547200 777389080576      30% /
"""


def probe_output(path: str, version: str) -> str:
    return f"{path}\n{version}\n"


@pytest.mark.parametrize(
    ("text", "id_", "version_id", "pretty"),
    [
        (OPENEULER, "openEuler", "22.03", "openEuler 22.03 (LTS-SP1)"),
        (KYLIN, "kylin", "V10", "Kylin Linux Advanced Server V10 (Lance)"),
        (UBUNTU, "ubuntu", "22.04", "Ubuntu 22.04.4 LTS"),
    ],
)
def test_it_reads_os_release_of_the_usual_ascend_hosts(text, id_, version_id, pretty):
    parsed = parse_os_release(text)
    assert (parsed["id"], parsed["version_id"], parsed["pretty_name"]) == (id_, version_id, pretty)


def test_it_keeps_an_os_release_value_with_an_unbalanced_quote():
    assert parse_os_release('NAME="Broken\n')["name"] == "Broken"


def test_it_splits_uname_release_and_machine():
    assert parse_uname("5.10.0-136.12.0.86.oe2203sp1.aarch64 aarch64\n") == {
        "kernel": "5.10.0-136.12.0.86.oe2203sp1.aarch64",
        "arch": "aarch64",
    }


def test_it_reads_kunpeng_topology_from_lscpu():
    parsed = parse_lscpu(LSCPU_KUNPENG)
    assert parsed["model_name"] == "Kunpeng-920"
    assert parsed["vendor"] == "HiSilicon"
    assert (parsed["cpus"], parsed["sockets"], parsed["cores_per_socket"]) == (192, 4, 48)
    assert parsed["numa_nodes"] == 8
    assert parsed["numa_cpus"][7] == "168-191"


def test_it_counts_clusters_as_sockets_when_newer_lscpu_cannot_see_them():
    parsed = parse_lscpu(LSCPU_NESTED_NO_MODEL)
    assert (parsed["sockets"], parsed["cores_per_socket"]) == (2, 48)
    assert parsed["model_name"] is None
    assert parsed["numa_cpus"] == {0: "0-23", 1: "24-47", 2: "48-71", 3: "72-95"}


def test_it_names_kunpeng_920_from_cpuinfo_implementer_and_part():
    assert parse_cpuinfo(CPUINFO_KUNPENG) == {
        "model_name": "Kunpeng-920",
        "vendor": "HiSilicon",
        "processors": 2,
    }


def test_it_names_an_unknown_arm_part_by_its_numbers():
    text = CPUINFO_KUNPENG.replace("0xd01", "0xd02")
    assert parse_cpuinfo(text)["model_name"] == "HiSilicon part 0xd02"


def test_it_reads_the_model_name_of_an_x86_cpuinfo():
    parsed = parse_cpuinfo(CPUINFO_X86)
    assert parsed["model_name"] == "Intel(R) Xeon(R) Gold 6348 CPU @ 2.60GHz"
    assert parsed["vendor"] == "GenuineIntel"


def test_it_turns_meminfo_kilobytes_into_bytes_and_keeps_page_counts():
    parsed = parse_meminfo(MEMINFO)
    assert parsed["MemTotal"] == 1056453348 * 1024
    assert parsed["Active(anon)"] == 4194304 * 1024
    assert parsed["HugePages_Total"] == 1024


def test_it_reads_a_numa_node_meminfo():
    assert parse_meminfo(NODE0_MEMINFO)["MemTotal"] == 131806100 * 1024


@pytest.mark.parametrize(
    ("text", "expected"),
    [("0-3", [0, 1, 2, 3]), ("0-1,4,6-7\n", [0, 1, 4, 6, 7]), ("5", [5]), ("", []), ("\n", [])],
)
def test_it_expands_kernel_cpu_lists(text, expected):
    assert parse_numa_cpulist(text) == expected


def test_it_reads_df_in_bytes_with_its_mount_points():
    disks = parse_df(DF)
    assert disks[1] == {
        "filesystem": "/dev/nvme0n1p1",
        "mount": "/data",
        "size_bytes": 7681501126656,
        "used_bytes": 2199023255552,
        "available_bytes": 5482477871104,
    }


def test_it_keeps_a_mount_point_with_spaces():
    text = (
        "Filesystem 1-blocks Used Available Capacity Mounted on\n/dev/sdb1 100 40 60 40% /mnt/model store\n"
    )
    assert parse_df(text)[0]["mount"] == "/mnt/model store"


def test_it_lists_hugepage_sizes_from_the_folder_names():
    assert parse_hugepage_dirs("hugepages-2048kB\nhugepages-1048576kB\nhugepages-64kB\n") == [
        64,
        2048,
        1048576,
    ]


@pytest.mark.parametrize(
    ("bus_id", "expected"),
    [("0000:C1:00.0", "0000:c1:00.0"), (" 0000:81:00.0 ", "0000:81:00.0"), ("NA", None), ("-", None)],
)
def test_it_lower_cases_npu_smi_bus_ids_for_sysfs(bus_id, expected):
    assert sysfs_bus_id(bus_id) == expected


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def kunpeng_tree(root: Path) -> None:
    """A simulated Atlas 800I A2 host: the files collect_host_facts reads, under root."""
    write(root / "etc" / "os-release", OPENEULER)
    write(root / "proc" / "meminfo", MEMINFO)
    write(root / "proc" / "cpuinfo", CPUINFO_KUNPENG)
    write(root / "sys" / "devices" / "system" / "node" / "online", "0-1\n")
    write(root / "sys" / "devices" / "system" / "node" / "node0" / "cpulist", "0-23\n")
    write(root / "sys" / "devices" / "system" / "node" / "node0" / "meminfo", NODE0_MEMINFO)
    write(root / "sys" / "devices" / "system" / "node" / "node1" / "cpulist", "24-47\n")
    write(
        root / "sys" / "devices" / "system" / "node" / "node1" / "meminfo",
        NODE0_MEMINFO.replace("Node 0", "Node 1"),
    )
    for size, total, free in ((2048, 1024, 1000), (1048576, 0, 0)):
        folder = root / "sys" / "kernel" / "mm" / "hugepages" / f"hugepages-{size}kB"
        write(folder / "nr_hugepages", f"{total}\n")
        write(folder / "free_hugepages", f"{free}\n")
    write(root / "sys" / "bus" / "pci" / "devices" / "0000:c1:00.0" / "numa_node", "2\n")
    write(root / "sys" / "bus" / "pci" / "devices" / "0000:81:00.0" / "numa_node", "-1\n")


def simulated_commands() -> dict:
    commands = {
        ("env", "LC_ALL=C", "lscpu"): LSCPU_KUNPENG,
        ("env", "LC_ALL=C", "uname", "-r", "-m"): "5.10.0-136.12.0.86.oe2203sp1.aarch64 aarch64\n",
    }
    for command in PYTHON_COMMANDS:
        commands[("env", command, "-c", PYTHON_PROBE)] = FakeResult(
            ["env", command], exit_status=127, stderr=f"env: '{command}': No such file or directory"
        )
    commands[("env", "python3", "-c", PYTHON_PROBE)] = probe_output("/usr/bin/python3", "3.9.9")
    commands[("env", "python3.9", "-c", PYTHON_PROBE)] = probe_output("/usr/bin/python3.9", "3.9.9")
    commands[("env", "python3.11", "-c", PYTHON_PROBE)] = probe_output(
        "/usr/local/python3.11.10/bin/python3.11", "3.11.10"
    )
    return commands


async def test_it_collects_a_simulated_host_from_its_directory_tree(tmp_path):
    kunpeng_tree(tmp_path)
    # Files come from the tree and ls / df run for real on it, as they would through the local runner.
    runner = FakeRunner(commands=simulated_commands(), real_files=True, real_commands=True)
    facts = await collect_host_facts(runner, host_root=str(tmp_path), disk_paths=("/",))

    assert facts["os"]["pretty_name"] == "openEuler 22.03 (LTS-SP1)"
    assert (facts["kernel"], facts["arch"]) == ("5.10.0-136.12.0.86.oe2203sp1.aarch64", "aarch64")
    assert facts["cpu"] == {
        "model": "Kunpeng-920",
        "vendor": "HiSilicon",
        "sockets": 4,
        "cores": 192,
        "threads_per_core": 1,
        "logical_cpus": 192,
    }
    assert facts["numa_nodes"] == [
        {
            "node": 0,
            "cpulist": "0-23",
            "cpus": 24,
            "memory_total_bytes": 131806100 * 1024,
            "memory_free_bytes": 120000000 * 1024,
        },
        {
            "node": 1,
            "cpulist": "24-47",
            "cpus": 24,
            "memory_total_bytes": 131806100 * 1024,
            "memory_free_bytes": 120000000 * 1024,
        },
    ]
    assert facts["memory"] == {
        "total_bytes": 1056453348 * 1024,
        "available_bytes": 998760448 * 1024,
        "free_bytes": 913113600 * 1024,
    }
    assert facts["hugepages"] == [
        {"size_kb": 2048, "total": 1024, "free": 1000},
        {"size_kb": 1048576, "total": 0, "free": 0},
    ]
    assert facts["pythons"] == [
        {"command": "python3", "path": "/usr/bin/python3", "version": "3.9.9"},
        {"command": "python3.9", "path": "/usr/bin/python3.9", "version": "3.9.9"},
        {"command": "python3.11", "path": "/usr/local/python3.11.10/bin/python3.11", "version": "3.11.10"},
    ]
    assert len(facts["disks"]) == 1
    assert facts["disks"][0]["size_bytes"] > 0
    assert ["env", "LC_ALL=C", "df", "-P", "-B1", f"{tmp_path}/"] in runner.calls


async def test_it_falls_back_to_cpuinfo_and_lscpu_numa_lists_on_a_bare_host():
    lscpu_without_model = LSCPU_NESTED_NO_MODEL
    runner = FakeRunner(
        commands={
            ("env", "LC_ALL=C", "lscpu"): lscpu_without_model,
            ("env", "LC_ALL=C", "uname", "-r", "-m"): "4.19.90-24.4.v2101.ky10.aarch64 aarch64\n",
            ("env", "LC_ALL=C", "df", "-P", "-B1", "/", "/data"): FakeResult(
                ["df"], exit_status=1, stdout=DF, stderr="df: /data: No such file or directory"
            ),
        },
        files={"/etc/os-release": KYLIN, "/proc/cpuinfo": CPUINFO_KUNPENG},
    )
    facts = await collect_host_facts(runner, disk_paths=("/", "/data"))

    assert facts["os"]["id"] == "kylin"
    assert facts["cpu"]["model"] == "Kunpeng-920"
    assert (facts["cpu"]["sockets"], facts["cpu"]["cores"]) == (2, 96)
    assert [(node["node"], node["cpulist"], node["cpus"]) for node in facts["numa_nodes"]] == [
        (0, "0-23", 24),
        (1, "24-47", 24),
        (2, "48-71", 24),
        (3, "72-95", 24),
    ]
    assert facts["numa_nodes"][0]["memory_total_bytes"] is None
    assert facts["memory"] is None
    assert facts["hugepages"] == []
    assert facts["pythons"] == []
    assert [disk["mount"] for disk in facts["disks"]] == ["/", "/data"]


async def test_a_host_that_answers_nothing_gives_empty_facts_not_an_error():
    facts = await collect_host_facts(FakeRunner())
    assert facts["os"] is None
    assert facts["kernel"] is None
    assert facts["arch"] is None
    assert facts["cpu"]["model"] is None
    assert facts["numa_nodes"] == []
    assert facts["disks"] == []


async def test_it_reads_each_npus_numa_node_from_sysfs(tmp_path):
    kunpeng_tree(tmp_path)
    runner = FakeRunner(real_files=True)
    nodes = await npu_numa_nodes(
        runner, ["0000:C1:00.0", "0000:81:00.0", "NA", "0000:C2:00.0"], str(tmp_path)
    )
    assert nodes == {"0000:C1:00.0": 2, "0000:81:00.0": None, "NA": None, "0000:C2:00.0": None}
    assert f"{tmp_path}/sys/bus/pci/devices/0000:c1:00.0/numa_node" in runner.reads


async def test_the_local_runner_reads_a_simulated_host_tree_like_a_real_one(tmp_path):
    import platform

    from workers.hosts.local import LocalRunner

    kunpeng_tree(tmp_path)
    facts = await collect_host_facts(LocalRunner(), host_root=str(tmp_path), disk_paths=("/",))

    # Files come from the tree; commands (uname, lscpu, df, python) from this machine.
    assert facts["os"]["version_id"] == "22.03"
    assert [node["cpulist"] for node in facts["numa_nodes"]] == ["0-23", "24-47"]
    assert facts["memory"]["total_bytes"] == 1056453348 * 1024
    assert facts["hugepages"][0] == {"size_kb": 2048, "total": 1024, "free": 1000}
    assert facts["arch"] == platform.machine()
    assert facts["kernel"] == platform.release()
    assert facts["disks"][0]["size_bytes"] > 0
    for python in facts["pythons"]:
        assert python["command"] in PYTHON_COMMANDS
        assert re.fullmatch(r"3\.\d+\.\d+", python["version"])
    nodes = await npu_numa_nodes(LocalRunner(), ["0000:C1:00.0"], str(tmp_path))
    assert nodes == {"0000:C1:00.0": 2}
