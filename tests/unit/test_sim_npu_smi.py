"""The sim host's npu-smi prints what the real one prints, and the agent's parser reads it unchanged."""

import os
import subprocess
import sys
import time

import pytest

from workers.ascend.npu_smi import (
    NpuSmiError,
    parse_kv,
    parse_mapping,
    parse_readings,
    parse_table,
    raise_for_error,
)
from workers.sim import state as sim_state
from workers.sim.profiles import PROFILES
from workers.sim.readings import read_chips
from workers.sim.tree import create_host

ALL_PROFILES = sorted(PROFILES)


@pytest.fixture(scope="module")
def hosts(tmp_path_factory):
    """One sim root per profile, created once: creating writes a few hundred small files."""
    roots = {}
    for name in ALL_PROFILES:
        roots[name] = tmp_path_factory.mktemp(name)
        create_host(roots[name], name)
    return roots


@pytest.fixture
def a2(tmp_path):
    create_host(tmp_path, "atlas-800i-a2")
    return tmp_path


def npu_smi(root, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(root / "bin" / "npu-smi"), *args], capture_output=True, text=True, timeout=30, check=False
    )


def sleeper():
    """A live process to hold chips; killed by the test that started it."""
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])


@pytest.mark.parametrize("name", ALL_PROFILES)
def test_the_table_parses_into_every_chip_of_the_profile(hosts, name):
    profile = PROFILES[name]
    result = npu_smi(hosts[name], "info")
    assert result.returncode == 0, result.stdout

    table = parse_table(result.stdout)

    assert table["version"] == profile.npu_smi_version
    parsed = [(c["npu_id"], c["chip_id"], c["bus_id"]) for c in table["chips"]]
    assert parsed == [(c.npu_id, c.chip_id, c.bus_id) for c in profile.chips]
    assert {c["health"] for c in table["chips"]} == {"OK"}
    assert table["processes"] == []


@pytest.mark.parametrize("name", ALL_PROFILES)
def test_every_table_line_has_the_width_of_its_layout(hosts, name):
    lines = npu_smi(hosts[name], "info").stdout.splitlines()
    width = 106 if PROFILES[name].family == "310P" else 98
    assert {len(line) for line in lines} == {width}


def test_a2_reports_hbm_and_power_while_310p_reports_ddr_and_power_na(hosts):
    a2 = parse_table(npu_smi(hosts["atlas-800i-a2"], "info").stdout)["chips"][0]
    assert (a2["hbm_total_mb"], a2["memory_total_mb"]) == (65536, 0)
    assert a2["power_w"] > 80

    pro = parse_table(npu_smi(hosts["atlas-300i-pro"], "info").stdout)["chips"][0]
    assert (pro["memory_total_mb"], pro["hbm_total_mb"], pro["power_w"]) == (21527, None, None)


def test_the_a3_second_die_shows_power_as_a_dash(hosts):
    text = npu_smi(hosts["atlas-800-a3"], "info").stdout
    assert "Chip  Phy-ID" in text
    chips = parse_table(text)["chips"]
    assert [c["power_w"] is None for c in chips[:4]] == [False, True, False, True]


def test_duo_cards_show_two_chips_under_one_npu_id_with_the_chip_device_header(hosts):
    text = npu_smi(hosts["atlas-300i-duo"], "info").stdout
    assert "| Chip    Device" in text
    chips = parse_table(text)["chips"]
    assert [(c["npu_id"], c["chip_id"], c["device_id"]) for c in chips] == [
        (1, 0, 0),
        (1, 1, 1),
        (2, 0, 2),
        (2, 1, 3),
    ]


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("atlas-800i-a2", [(npu, 0, npu) for npu in range(8)]),
        ("atlas-300i-pro", [(0, 0, 0), (32, 0, 1), (32768, 0, 2), (32800, 0, 3)]),
        ("atlas-300i-duo", [(1, 0, 0), (1, 1, 1), (2, 0, 2), (2, 1, 3)]),
        ("atlas-800-a3", [(npu, die, npu * 2 + die) for npu in range(8) for die in range(2)]),
    ],
)
def test_mapping_gives_the_logic_ids_of_the_profile(hosts, name, expected):
    rows = parse_mapping(npu_smi(hosts[name], "info", "-m").stdout)
    chips = [(r["npu_id"], r["chip_id"], r["logic_id"]) for r in rows if r["logic_id"] is not None]
    assert chips == expected


def test_mapping_lists_the_mcu_without_a_logic_id_on_duo(hosts):
    rows = parse_mapping(npu_smi(hosts["atlas-300i-duo"], "info", "-m").stdout)
    mcus = [(r["npu_id"], r["chip_id"]) for r in rows if r["logic_id"] is None]
    assert mcus == [(1, 2), (2, 2)]


def test_usages_blocks_end_with_the_chip_id_and_parse_per_chip(hosts):
    text = npu_smi(hosts["atlas-300i-duo"], "info", "-t", "usages", "-i", "2").stdout
    assert text.rstrip().splitlines()[-1].split(":")[0].strip() == "Chip ID"
    readings = parse_readings(text, npu=2)
    assert [(r.chip_id, r.memory_total_mb) for r in readings] == [(0, 44280), (1, 43693)]


def test_common_has_an_mcu_block_with_card_power(hosts):
    blocks = parse_kv(npu_smi(hosts["atlas-800i-a2"], "info", "-t", "common", "-i", "0").stdout)
    assert blocks[-1]["Chip Name"] == "mcu"
    assert float(blocks[-1]["NPU Real-time Power(W)"]) > 0
    assert blocks[1]["Chip ID"] == "0"
    assert blocks[1]["Aicore Count"] == "20"


@pytest.mark.parametrize(
    ("kind", "key"),
    [("power", "NPU Real-time Power(W)"), ("temp", "NPU Temperature (C)"), ("memory", "HBM Capacity(MB)")],
)
def test_a2_answers_each_t_type_for_a_chip(hosts, kind, key):
    result = npu_smi(hosts["atlas-800i-a2"], "info", "-t", kind, "-i", "5", "-c", "0")
    chip_block = parse_kv(result.stdout)[-1]
    assert chip_block["Chip ID"] == "0"
    assert chip_block[key] not in ("", "NA")


def test_310p_power_comes_from_the_mcu_only(hosts):
    root = hosts["atlas-300i-duo"]
    assert (
        "does not support querying power" in npu_smi(root, "info", "-t", "power", "-i", "1", "-c", "0").stdout
    )
    mcu = parse_kv(npu_smi(root, "info", "-t", "power", "-i", "1", "-c", "2").stdout)[0]
    assert float(mcu["Power Dissipation(W)"]) > 0


def test_board_gives_the_soc_parts_vllm_ascend_combines(hosts):
    a2 = parse_readings(npu_smi(hosts["atlas-800i-a2"], "info", "-t", "board", "-i", "0", "-c", "0").stdout)[
        0
    ]
    assert (a2.raw("Chip Type"), a2.raw("Chip Name")) == ("Ascend", "910B3")
    a3 = parse_kv(npu_smi(hosts["atlas-800-a3"], "info", "-t", "board", "-i", "3", "-c", "1").stdout)[0]
    assert (a3["Chip Name"], a3["NPU Name"]) == ("Ascend910", "9382")


def test_list_prints_every_npu_and_its_chip_count(hosts):
    blocks = parse_kv(npu_smi(hosts["atlas-300i-duo"], "info", "-l").stdout)
    assert blocks[0] == {"Total Count": "2"}
    assert [(b["NPU ID"], b["Chip Count"], b["Product Name"]) for b in blocks[1:]] == [
        ("1", "2", "Atlas 300I Duo"),
        ("2", "2", "Atlas 300I Duo"),
    ]


def test_a_holder_shows_as_a_process_with_its_hbm_on_its_chips(a2):
    holder = sleeper()
    try:
        sim_state.hold(a2, holder.pid, [0, 3], 30000, "python3.11-vllm-worker", load_fraction=0.8)
        table = parse_table(npu_smi(a2, "info").stdout)
    finally:
        holder.kill()
        holder.wait()

    processes = [(p["npu_id"], p["chip_id"], p["pid"], p["name"], p["memory_mb"]) for p in table["processes"]]
    assert processes == [
        (0, 0, holder.pid, "python3.11-vllm", 30000),
        (3, 0, holder.pid, "python3.11-vllm", 30000),
    ]
    chips = {c["npu_id"]: c for c in table["chips"]}
    assert chips[0]["hbm_used_mb"] == PROFILES["atlas-800i-a2"].chips[0].memory_base_mb + 30000
    assert chips[0]["aicore_pct"] > 50
    assert chips[1]["aicore_pct"] == 0
    assert chips[3]["power_w"] > chips[1]["power_w"] + 100


def test_a_dead_holder_drops_out_like_on_the_real_driver(a2):
    holder = sleeper()
    sim_state.hold(a2, holder.pid, [1], 20000, "python")
    holder.kill()
    holder.wait()

    table = parse_table(npu_smi(a2, "info").stdout)

    assert table["processes"] == []
    assert table["chips"][1]["hbm_used_mb"] == PROFILES["atlas-800i-a2"].chips[1].memory_base_mb


def test_release_frees_the_chips(a2):
    sim_state.hold(a2, os.getpid(), [2], 10000, "pytest")
    sim_state.release(a2, os.getpid())
    assert sim_state.load(a2)["holders"] == []


def test_readings_move_a_little_between_calls_a_second_apart(a2):
    profile = PROFILES["atlas-800i-a2"]
    state = sim_state.load(a2)
    now = time.time()
    first, later = read_chips(profile, state, now), read_chips(profile, state, now + 1)

    assert [r.power_w for r in first] != [r.power_w for r in later]
    assert all(abs(a.power_w - b.power_w) < 5 for a, b in zip(first, later, strict=True))
    assert [r.power_w for r in first] == [r.power_w for r in read_chips(profile, state, now)]


def test_an_unloaded_driver_fails_like_the_real_tool(a2):
    sim_state.set_driver_unloaded(a2)
    result = npu_smi(a2, "info")

    assert result.stdout.strip() == "dcmi module initialize failed. ret is -8005"
    assert result.returncode == -8005 & 0xFF
    with pytest.raises(NpuSmiError):
        parse_table(result.stdout)
    with pytest.raises(NpuSmiError):
        raise_for_error(result.stdout)


def test_a_device_held_elsewhere_fails_with_8020(a2):
    sim_state.set_device_held(a2)
    result = npu_smi(a2, "info", "-m")

    assert "because the device is used. ret is -8020" in result.stdout
    assert result.returncode == -8020 & 0xFF
    with pytest.raises(NpuSmiError):
        parse_mapping(result.stdout)


def test_fault_cli_turns_a_chip_to_alarm_and_clear_restores_it(a2):
    def fault(*args):
        command = [sys.executable, "-m", "workers.sim", "fault", "--root", str(a2), *args]
        return subprocess.run(command, capture_output=True, text=True, timeout=30, check=True)

    fault("--npu", "4", "--health", "Alarm")
    chips = parse_table(npu_smi(a2, "info").stdout)["chips"]
    health = parse_readings(npu_smi(a2, "info", "-t", "health", "-i", "4").stdout)[0]
    assert [c["health"] for c in chips].count("Alarm") == 1
    assert chips[4]["health"] == "Alarm"
    assert health.health == "Alarm"
    assert health.error_code not in (None, "NA")

    fault("--clear")
    assert {c["health"] for c in parse_table(npu_smi(a2, "info").stdout)["chips"]} == {"OK"}


def test_fault_cli_rejects_a_chip_the_npu_does_not_have(a2):
    command = [
        sys.executable,
        "-m",
        "workers.sim",
        "fault",
        "--root",
        str(a2),
        "--npu",
        "9",
        "--health",
        "Warning",
    ]
    result = subprocess.run(command, capture_output=True, text=True, timeout=30, check=False)
    assert result.returncode == 1
    assert "NPU 9 does not exist" in result.stderr


def test_an_unknown_t_type_is_refused_on_stdout(hosts):
    result = npu_smi(hosts["atlas-800i-a2"], "info", "-t", "nonsense", "-i", "0")
    assert result.returncode != 0
    assert "Error parameter of -t" in result.stdout
