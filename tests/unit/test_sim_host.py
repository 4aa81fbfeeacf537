"""A sim root looks like a Kunpeng + Ascend host to the agent's fact and version readers."""

import json
import subprocess
import sys

import pytest

from workers.ascend.facts import collect_host_facts, npu_numa_nodes
from workers.hosts.local import LocalRunner
from workers.sim import state as sim_state
from workers.sim.profiles import PROFILES
from workers.sim.state import SimStateError
from workers.sim.tree import create_host


@pytest.fixture(scope="module")
def a2(tmp_path_factory):
    root = tmp_path_factory.mktemp("a2")
    create_host(root, "atlas-800i-a2", node_name="npu-a2-07")
    return root


def run(root, tool, *args) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(root / "bin" / tool), *args], capture_output=True, text=True, timeout=30, check=False
    )


def info_file(path) -> dict[str, str]:
    return dict(line.split("=", 1) for line in path.read_text().splitlines() if "=" in line)


def test_the_cli_writes_tools_state_and_tree(tmp_path):
    command = [
        sys.executable,
        "-m",
        "workers.sim",
        "create",
        "--profile",
        "atlas-300i-duo",
        "--root",
        str(tmp_path),
    ]
    subprocess.run(command, capture_output=True, text=True, timeout=60, check=True)

    for tool in ("npu-smi", "lscpu", "numactl", "uname"):
        script = tmp_path / "bin" / tool
        assert script.read_text().startswith(f"#!{sys.executable}\n")
        assert script.stat().st_mode & 0o111
    state = json.loads((tmp_path / "state.json").read_text())
    assert (state["profile"], state["node_name"], state["holders"]) == (
        "atlas-300i-duo",
        "ascend-300iduo-01",
        [],
    )
    assert (
        'PRETTY_NAME="Kylin Linux Advanced Server V10 (Sword)"' in (tmp_path / "etc/os-release").read_text()
    )


def test_re_creating_keeps_faults_and_holders_unless_reset(tmp_path):
    create_host(tmp_path, "atlas-800i-a2")
    sim_state.set_health(tmp_path, 2, 0, "Warning")
    sim_state.hold(tmp_path, 1, [0], 1000, "init")

    again = create_host(tmp_path, "atlas-800i-a2")
    assert again["faults"]["health"] == {"2:0": "Warning"}
    assert len(again["holders"]) == 1

    fresh = create_host(tmp_path, "atlas-800i-a2", reset=True)
    assert fresh["faults"]["health"] == {}
    assert fresh["holders"] == []


def test_switching_profile_needs_reset_and_leaves_no_stale_devices(tmp_path):
    create_host(tmp_path, "atlas-800-a3")
    with pytest.raises(SimStateError, match="--reset"):
        create_host(tmp_path, "atlas-800i-a2")

    create_host(tmp_path, "atlas-800i-a2", reset=True)
    devices = sorted(p.name for p in (tmp_path / "sys/bus/pci/devices").iterdir())
    assert devices == sorted(chip.sysfs_bus_id for chip in PROFILES["atlas-800i-a2"].chips)


def test_the_ascend_tree_has_the_version_files_installers_write(a2):
    ascend = a2 / "usr/local/Ascend"
    profile = PROFILES["atlas-800i-a2"]
    assert info_file(ascend / "driver/version.info")["Version"] == profile.driver_version
    assert info_file(ascend / "firmware/version.info")["Version"] == profile.firmware_version
    toolkit = info_file(ascend / "ascend-toolkit/latest/aarch64-linux/ascend_toolkit_install.info")
    assert (toolkit["version"], toolkit["arch"]) == (profile.cann_version, "aarch64")
    assert "runtime_running_version=" in (ascend / "ascend-toolkit/latest/version.cfg").read_text()
    assert (
        f"Ascend-cann-atb : {profile.cann_version}" in (ascend / "nnal/atb/latest/version.info").read_text()
    )
    assert (ascend / "ascend-toolkit/set_env.sh").exists()
    assert (ascend / "nnal/atb/set_env.sh").exists()
    assert "Driver_Install_Status=complete" in (a2 / "etc/ascend_install.info").read_text()


def test_cpuinfo_names_a_kunpeng_920(a2):
    text = (a2 / "proc/cpuinfo").read_text()
    assert text.count("processor\t:") == 128
    assert "CPU implementer\t: 0x48" in text
    assert "CPU part\t: 0xd01" in text


async def test_host_facts_read_through_the_local_runner_match_the_profile(a2, monkeypatch):
    monkeypatch.setenv("PATH", f"{a2 / 'bin'}:/usr/bin:/bin")
    facts = await collect_host_facts(LocalRunner(), host_root=str(a2), disk_paths=("/",))

    assert (facts["os"]["version_id"], facts["arch"]) == ("22.03", "aarch64")
    assert facts["kernel"] == PROFILES["atlas-800i-a2"].kernel
    assert (facts["cpu"]["model"], facts["cpu"]["sockets"], facts["cpu"]["logical_cpus"]) == (
        "Kunpeng-920",
        2,
        128,
    )
    assert [n["cpulist"] for n in facts["numa_nodes"]] == ["0-31", "32-63", "64-95", "96-127"]
    assert facts["numa_nodes"][0]["memory_total_bytes"] == 257_024 * 1024 * 1024
    assert {h["size_kb"] for h in facts["hugepages"]} == {64, 2048, 32768, 1048576}


async def test_each_npu_has_the_numa_node_of_its_pci_bus(a2):
    chips = PROFILES["atlas-800i-a2"].chips
    nodes = await npu_numa_nodes(LocalRunner(), [c.bus_id for c in chips], str(a2))
    assert nodes == {"0000:C1:00.0": 3, "0000:01:00.0": 0, "0000:C2:00.0": 3, "0000:02:00.0": 0,
                     "0000:81:00.0": 2, "0000:41:00.0": 1, "0000:82:00.0": 2, "0000:42:00.0": 1}  # fmt: skip


def test_lscpu_json_lists_the_numa_nodes(a2):
    fields = {f["field"]: f["data"] for f in json.loads(run(a2, "lscpu", "-J").stdout)["lscpu"]}
    assert fields["NUMA node(s):"] == "4"
    assert fields["NUMA node3 CPU(s):"] == "96-127"


def test_numactl_hardware_prints_nodes_sizes_and_distances(a2):
    lines = run(a2, "numactl", "-H").stdout.splitlines()
    assert lines[0] == "available: 4 nodes (0-3)"
    assert lines[1] == "node 0 cpus: " + " ".join(str(cpu) for cpu in range(32))
    assert lines[2] == "node 0 size: 257024 MB"
    assert lines[-5:] == [
        "node   0   1   2   3 ",
        "  0:  10  12  20  22 ",
        "  1:  12  10  22  24 ",
        "  2:  20  22  10  12 ",
        "  3:  22  24  12  10 ",
    ]


def test_numactl_binds_to_a_valid_node_and_runs_the_command(a2):
    result = run(a2, "numactl", "--cpunodebind=2", "--membind", "2", sys.executable, "-c", "print('bound')")
    assert (result.returncode, result.stdout) == (0, "bound\n")


def test_numactl_refuses_a_node_the_host_does_not_have(a2):
    result = run(a2, "numactl", "--cpunodebind=4", "--membind=4", "true")
    assert result.returncode == 1
    assert "node argument 4 is out of range" in result.stderr


def test_uname_reports_the_sim_kernel_and_node(a2):
    assert run(a2, "uname", "-n", "-m").stdout == "npu-a2-07 aarch64\n"


async def test_the_version_reader_finds_every_component_of_the_profile(a2):
    from workers.ascend.versions import find_versions

    profile = PROFILES["atlas-800i-a2"]
    found = await find_versions(LocalRunner(), str(a2 / "usr/local/Ascend"))

    versions = {name: entry["version"] for name, entry in found.items()}
    assert versions == {
        "driver": profile.driver_version,
        "firmware": profile.firmware_version,
        "cann-toolkit": profile.cann_version,
        "nnal": profile.cann_version,
    }
