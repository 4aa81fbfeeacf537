"""The npu-smi parsers over every real capture in ../shared/ascend-samples, checked against figures
read off each file by hand. Skipped where the folder is absent."""

import pytest

from tests.unit.ascend_samples import read_sample, sample_names
from workers.ascend.npu_smi import parse_list, parse_mapping, parse_readings, parse_table


def pick(rows: list[dict], *fields: str) -> list[tuple]:
    return [tuple(row[field] for field in fields) for row in rows]


# File -> what the file shows. "chips" lists (npu_id, chip_id, device_id, power_w, temp_c) for every
# chip; "memory" and "hbm" list (used, total) per chip; "processes" (npu_id, chip_id, pid, memory_mb).
TABLES = {
    "npu-smi-info_310-Atlas800-3000_20.2.0_hwdoc.txt": {
        "version": "20.2.0",
        "chips": [(215, 0, 0, 12.8, 56), (215, 1, 1, 12.8, 57), (215, 2, 2, 12.8, 57), (215, 3, 3, 12.8, 55)],
        "memory": [(2703, 8192)] * 4,
        "hbm": [(None, None)] * 4,
        "hugepages": [(None, None)] * 4,
        "processes": [],
    },
    "npu-smi-info_310-Atlas800-3000_21.0.4_hwdoc.txt": {
        "version": "21.0.4.B030",
        "chips": [(6, 0, 3, 12.8, 73), (6, 1, 4, 12.8, 74), (6, 2, 5, 12.8, 70), (6, 3, 6, 12.8, 65)],
        "memory": [(2703, 8192), (2867, 8192), (2867, 8192), (2867, 8192)],
        "hugepages": [(0, 970)] * 4,
        "processes": [],
    },
    "npu-smi-info_310B1_01.txt": {
        "version": "23.0.rc3",
        "chips": [(0, 0, 0, 9.0, 57)],
        "memory": [(7356, 11577)],
        "hbm": [(None, None)],
        "hugepages": [(15, 15)],
        "bus_ids": [None],
        "names": ["310B1"],
    },
    "npu-smi-info_310B4_01.txt": {
        "version": "23.0.0",
        "chips": [(0, 0, 0, 0.0, 65)],
        "memory": [(3628, 15609)],
        "health": ["Alarm"],
        "bus_ids": [None],
    },
    "npu-smi-info_310P3-300IPro_02.txt": {
        "version": "25.5.1",
        "chips": [(4, 0, 0, None, 37), (5, 0, 1, None, 40)],
        "memory": [(1848, 21525), (1849, 21525)],
        "hbm": [(None, None), (None, None)],
        "bus_ids": ["0000:81:00.0", "0000:85:00.0"],
    },
    "npu-smi-info_310P3_in-container-HAMi-vnpu_01.txt": {
        "version": "25.5.1",
        "chips": [(32768, 0, 0, None, 38)],
        "memory": [(0, 8192)],
    },
    "npu-smi-info_910-Atlas800-9010_24.1.RC2_hwdoc.txt": {
        "version": "24.1.RC2",
        "health": ["OK", "OK", "OK", "Warning", "OK", "OK", "OK", "Warning"],
        "power": [70.5, 71.2, 69.0, 206.9, 70.2, 64.9, 69.4, 203.2],
        "memory": [(4252, 15137), (4666, 15137), (4317, 15137), (3616, 15039)]
        + [(3708, 15137), (4346, 15137), (4261, 15137), (4521, 15039)],
        "hbm": [(0, 32768)] * 8,
        "hugepages": [(1232, 1232)] * 8,
        "process_count": 32,
        "process_pids": {
            0: [37656, 37664, 37640, 37648],
            3: [37643, 37651, 37659, 37667],
            7: [37671, 37647, 37655, 37663],
        },
        "process_names": {"hlt_host_devmm_"},
    },
    "npu-smi-info_910A-Atlas800-9010_22.0.3.1_hwdoc.txt": {
        "version": "22.0.3.1",
        "names": ["910A"] * 8,
        "power": [67.2, 63.3, 64.8, 191.7, 66.4, 62.7, 64.5, 191.4],
        "memory_first": (1867, 15077),
        "hbm": [(0, 32768)] * 8,
        "hugepages": [(15, 15)] * 8,
        "processes": [],
    },
    "npu-smi-info_910A_01.txt": {
        "version": "24.1.0",
        "names": ["910B"] * 8,
        "memory_first": (1197, 13553),
        "hbm_used": [1365, 4, 4, 3, 3, 5, 5, 4],
        "hbm_totals": {32768},
        "processes": [],
    },
    "npu-smi-info_910B1_busy_gpustack-docstring.txt": {
        "version": "23.0.rc3.3",
        "chips": [(0, 0, None, 271.1, 41), (1, 0, None, 275.0, 42)],
        "aicore": [55, 66],
        "memory": [(0, 0), (0, 0)],
        "hbm": [(65099, 65536), (65098, 65536)],
        "processes": [(0, 0, 576489, 60703), (1, 0, 576491, 60704)],
    },
    "npu-smi-info_910B2C_01.txt": {
        "version": "23.0.2.1",
        "chips": [(0, 0, None, 88.6, 51), (1, 0, None, 99.6, 50)],
        "hbm": [(20701, 65536), (20687, 65536)],
        "processes": [(0, 0, 124528, 17400)],
        "process_names": {"python3.8"},
    },
    "npu-smi-info_910B2_01.txt": {
        "version": "23.0.6",
        "power": [114.0, 89.5, 87.5, 90.3, 94.1, 94.0, 92.2, 91.2],
        "aicore": [6, 0, 0, 0, 0, 0, 0, 0],
        "hbm_used": [5092, 3334, 3334, 3335, 3334, 3335, 3335, 3336],
        "hbm_totals": {65536},
        "processes": [(0, 0, 769280, 1803)],
    },
    "npu-smi-info_950-A5_hwdoc.txt": {
        "version": "x.x.x",
        "chips": [(0, 0, None, 204.4, 56)],
        "memory": [(0, 0)],
        "hbm": [(4439, 86016)],
        "bus_ids": ["0000:91:00.0"],
        "processes": [],
    },
    "npu-smi-info_A3-Ascend910_01.txt": {
        "version": "25.2.0",
        "chips": [(0, 0, 0, 162.8, 37), (0, 1, 1, None, 37), (1, 0, 2, 167.1, 38), (1, 1, 3, None, 38)],
        "hbm": [(3133, 65536), (2876, 65536), (3116, 65536), (10568, 65536)],
        "processes": [(1, 1, 990711, 7746)],
    },
}


CHECKS = {
    "chips": lambda t: pick(t["chips"], "npu_id", "chip_id", "device_id", "power_w", "temp_c"),
    "memory": lambda t: pick(t["chips"], "memory_used_mb", "memory_total_mb"),
    "hbm": lambda t: pick(t["chips"], "hbm_used_mb", "hbm_total_mb"),
    "hugepages": lambda t: pick(t["chips"], "hugepages_used", "hugepages_total"),
    "health": lambda t: [c["health"] for c in t["chips"]],
    "power": lambda t: [c["power_w"] for c in t["chips"]],
    "names": lambda t: [c["name"] for c in t["chips"]],
    "bus_ids": lambda t: [c["bus_id"] for c in t["chips"]],
    "aicore": lambda t: [c["aicore_pct"] for c in t["chips"]],
    "hbm_used": lambda t: [c["hbm_used_mb"] for c in t["chips"]],
    "hbm_totals": lambda t: {c["hbm_total_mb"] for c in t["chips"]},
    "memory_first": lambda t: pick(t["chips"], "memory_used_mb", "memory_total_mb")[0],
    "processes": lambda t: pick(t["processes"], "npu_id", "chip_id", "pid", "memory_mb"),
    "process_count": lambda t: len(t["processes"]),
    "process_names": lambda t: {p["name"] for p in t["processes"]},
}


@pytest.mark.parametrize("name", sorted(TABLES))
def test_table_sample_reads_the_figures_printed_in_it(name):
    table = parse_table(read_sample(name))
    expected = TABLES[name]

    assert table["version"] == expected["version"]
    for check, want in expected.items():
        if check == "version":
            continue
        if check == "process_pids":
            for npu_id, pids in want.items():
                assert [p["pid"] for p in table["processes"] if p["npu_id"] == npu_id] == pids
        else:
            assert CHECKS[check](table) == want, check


MAPPINGS = {
    "npu-smi-info-m_310P-Duo_gpustack-fixture.txt": [
        (npu, chip, logic)
        for npu, base in ((1, 0), (2, 2), (4, 4), (5, 6))
        for chip, logic in ((0, base), (1, base + 1), (2, None))
    ],
    "npu-smi-info-m_310_20.2.0_hwdoc.txt": [(215, chip, chip) for chip in range(4)],
    "npu-smi-info-m_310_21.0.4_hwdoc.txt": [(6, chip, chip) for chip in range(4)] + [(6, 4, None)],
    "npu-smi-info-m_910A_24.1.RC2_hwdoc.txt": [(npu, 0, npu) for npu in range(8)],
    "npu-smi-info-m_910A_tab_mindcluster.txt": [(npu, 0, npu) for npu in range(8)],
    "npu-smi-info-m_910B_gpustack-fixture.txt": [
        row for npu in range(8) for row in ((npu, 0, npu), (npu, 1, None))
    ],
    "npu-smi-info-m_950_hwdoc.txt": [(0, 0, None)],
}
MAPPING_NAMES = {
    "npu-smi-info-m_310P-Duo_gpustack-fixture.txt": {"Ascend xxx", "Mcu"},
    "npu-smi-info-m_310_20.2.0_hwdoc.txt": {"MiniD"},
    "npu-smi-info-m_310_21.0.4_hwdoc.txt": {"MiniD", "Mcu"},
    "npu-smi-info-m_910A_24.1.RC2_hwdoc.txt": {"Ascend 910A"},
    "npu-smi-info-m_910A_tab_mindcluster.txt": {"Ascend 910A"},
    "npu-smi-info-m_910B_gpustack-fixture.txt": {"Ascend xxx", "Mcu"},
    "npu-smi-info-m_950_hwdoc.txt": {"xxx"},
}


@pytest.mark.parametrize("name", sorted(MAPPINGS))
def test_mapping_sample_gives_each_chip_its_logic_id(name):
    rows = parse_mapping(read_sample(name))

    assert pick(rows, "npu_id", "chip_id", "logic_id") == MAPPINGS[name]
    assert {row["chip_name"] for row in rows} == MAPPING_NAMES[name]


# File -> (npu, chip) passed as -i / -c where the output prints no id, and per reading the
# normalised figures read off the file.
READINGS = {
    "npu-smi-info-t-board-chip_910A_mindcluster.txt": (
        None,
        [
            {
                "npu_id": 0,
                "chip_id": 0,
                "soc_name": "Ascend910A",
                "bus_id": "0000:61:00.0",
                "firmware_version": "7.1.0.7.220",
            }
        ],
    ),
    "npu-smi-info-t-board-npu_910A_mindcluster.txt": (
        None,
        [{"npu_id": 0, "chip_id": None, "bus_id": "0000:61:00.0", "firmware_version": "7.1.0.7.220"}],
    ),
    "npu-smi-info-t-board_310P_gpustack-docstring.txt": (
        None,
        [
            {
                "npu_id": 1,
                "chip_id": 0,
                "chip_name": "xxx",
                "bus_id": "0000:81:00.0",
                "firmware_version": "7.1.0.4",
            }
        ],
    ),
    "npu-smi-info-t-board_910B_gpustack-docstring.txt": (
        None,
        [{"npu_id": 0, "chip_id": 0, "bus_id": "0000:81:00.0", "firmware_version": "7.1.0.4.218"}],
    ),
    "npu-smi-info-t-common_310P-Duo_gpustack-fixture.txt": (
        None,
        [
            {"npu_id": 1, "chip_id": 0, "temperature_c": 60, "memory_usage_pct": 3, "aicore_freq_mhz": 960},
            {"npu_id": 1, "chip_id": 1, "temperature_c": 59, "memory_usage_pct": 3, "is_mcu": False},
            {"npu_id": 1, "chip_id": None, "is_mcu": True, "temperature_c": 48, "power_w": 45.2},
        ],
    ),
    "npu-smi-info-t-common_910B_gpustack-fixture.txt": (
        None,
        [
            {
                "npu_id": 0,
                "chip_id": 0,
                "temperature_c": 46,
                "power_w": 69.0,
                "hbm_usage_pct": 0,
                "memory_usage_pct": 6,
            },
            {"npu_id": 0, "is_mcu": True, "temperature_c": 48, "power_w": 45.2},
        ],
    ),
    "npu-smi-info-t-health_910A_mindcluster.txt": (
        (3, 0),
        [{"npu_id": 3, "chip_id": 0, "health": "OK", "error_code": None}],
    ),
    "npu-smi-info-t-health_950_hwdoc.txt": (None, [{"npu_id": 0, "health": "OK", "error_code": None}]),
    "npu-smi-info-t-power_950_hwdoc.txt": (None, [{"npu_id": 0, "power_w": 296.5}]),
    "npu-smi-info-t-temp_950_hwdoc.txt": (None, [{"npu_id": 0, "temperature_c": 53}]),
    "npu-smi-info-t-usages_310P-Duo_gpustack-fixture.txt": (
        None,
        [
            {
                "npu_id": 1,
                "chip_id": 0,
                "memory_total_mb": 44280,
                "memory_usage_pct": 3,
                "hbm_total_mb": None,
            },
            {"npu_id": 1, "chip_id": 1, "memory_total_mb": 43693, "memory_usage_pct": 3, "aicore_pct": 0},
        ],
    ),
    "npu-smi-info-t-usages_910A_mindcluster.txt": (
        None,
        [
            {
                "npu_id": 0,
                "chip_id": 0,
                "hbm_total_mb": 31129,
                "hbm_used_mb": 0,
                "memory_total_mb": 13553,
                "memory_usage_pct": 6,
            }
        ],
    ),
    "npu-smi-info-t-usages_910_gpustack-fixture.txt": (
        None,
        [{"npu_id": 0, "chip_id": 0, "hbm_total_mb": 32768, "memory_total_mb": 15171, "memory_usage_pct": 3}],
    ),
}


@pytest.mark.parametrize("name", sorted(READINGS))
def test_t_sample_gives_the_normalised_readings(name):
    ids, expected = READINGS[name]
    npu, chip = ids or (None, None)

    readings = parse_readings(read_sample(name), npu=npu, chip=chip)

    assert len(readings) == len(expected)
    for reading, want in zip(readings, expected, strict=True):
        assert {field: getattr(reading, field) for field in want} == want


def test_list_sample_of_the_950_gives_product_and_serial():
    (npu,) = parse_list(read_sample("npu-smi-info-l_950_hwdoc.txt"))

    assert (npu["npu_id"], npu["product_name"], npu["serial_number"]) == (
        0,
        "A5 PCIe Card",
        "IT23HMDA0502FAA",
    )


KNOWN = set(TABLES) | set(MAPPINGS) | set(READINGS) | {"npu-smi-info-l_950_hwdoc.txt"}


@pytest.mark.parametrize("name", [name for name in sample_names("npu-smi-info*.txt") if name not in KNOWN])
def test_samples_added_later_still_parse_to_a_non_empty_result(name):
    text = read_sample(name)
    if name.startswith("npu-smi-info_"):
        assert parse_table(text)["chips"]
    elif name.startswith("npu-smi-info-m_"):
        assert parse_mapping(text)
    elif name.startswith("npu-smi-info-l_"):
        assert parse_list(text)
    else:
        assert parse_readings(text)
