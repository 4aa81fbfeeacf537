"""The `key : value` outputs (-l, -t TYPE) and the -m mapping, on outputs composed in each documented form."""

# ruff: noqa: E501  (the -m fixtures keep npu-smi's 31-character columns)

import pytest

from workers.ascend.npu_smi import NpuSmiError, parse_kv, parse_list, parse_mapping, parse_readings

# -t usages on a 310P Duo, TAB-indented: the NPU header, then one block per chip CLOSED by `Chip ID`.
USAGES_DUO_TABS = (
    "\tNPU ID                         : 64\n"
    "\tChip Count                     : 2\n"
    "\n"
    "\tDDR Capacity(MB)               : 44280\n"
    "\tDDR Usage Rate(%)              : 10\n"
    "\tAicore Usage Rate(%)           : 35\n"
    "\tAicpu Usage Rate(%)            : 2\n"
    "\tChip ID                        : 0\n"
    "\tDDR Capacity(MB)               : 43693\n"
    "\tDDR Usage Rate(%)              : NA\n"
    "\tAicore Usage Rate(%)           : 0\n"
    "\tAicpu Usage Rate(%)            : 0\n"
    "\tChip ID                        : 1\n"
)

# -t common on a 910B, 8-space indentation: chip blocks OPENED by `Chip ID`, then the MCU block.
COMMON_910B_SPACES = """
        NPU ID                         : 3
        Chip Count                     : 1

        Chip ID                        : 0
        Memory Usage Rate(%)           : 6
        HBM Usage Rate(%)              : 92
        Aicore Usage Rate(%)           : 71
        Aicore Freq(MHZ)               : 1800
        Aicore curFreq(MHZ)            : 1650
        Temperature(C)                 : 52
        NPU Real-time Power(W)         : 287.4

        Chip Name                      : mcu
        Temperature(C)                 : 44
        NPU Real-time Power(W)         : 61.0
"""

# -t usages on 25.x with the new keys, no indentation.
USAGES_25X = """NPU ID                         : 0
Chip Count                     : 1

DDR Capacity(MB)               : 0
DDR Usage Rate(%)              : 0
HBM Capacity(MB)               : 65536
HBM Usage Rate(%)              : 75
Aicore Usage Rate(%)           : 40
Aivector Usage Rate(%)         : 12
NPU Utilization(%)             : 46
Aicube Usage Rate(%)           : 38
Chip ID                        : 0
"""

TEMP_SERVER = """\tNPU ID                         : 2
\tChip Count                     : 1

\tNPU Temperature (C)            : 61
\tChip ID                        : 0

\tLM75A_TE (C)                   : 33
\tChip Name                      : MCU
"""

HEALTH_OLD = "\tHealth Status                  : Warning\n\tError Code                     : 80E18008\n"
HEALTH_NEW = """        NPU ID                         : 5
        Health                         : OK
        Error Code                     : NA
        Error Information              : NA
"""
POWER_A3_DIE = """
        NPU ID                         : 1
        NPU Real-time Power(W)         : NA
        Chip ID                        : 1
"""
BOARD_CHIP = """NPU ID                         : 4
Chip ID                        : 0
Chip Type                      : Ascend
Chip Name                      : 910B3
PCB ID                         : NA
PCIe Bus Info                  : 0000:C1:00.0
Firmware Version               : 7.5.0.3.220
"""

LIST_EIGHT = "Total Count                    : 3\n\n" + "".join(
    f"NPU ID                         : {npu}\nChip Count                     : 1\n\n" for npu in (0, 32, 96)
)
LIST_950 = """Total Count                    : 1

NPU ID                         : 0
Product Name                   : A5 PCIe Card
Serial Number                  : 102XYZ0001
"""

MAPPING_DUO = """NPU ID                         Chip ID                        Chip Logic ID                  Chip Name
64                             0                              0                              Ascend 310P3
64                             1                              1                              Ascend 310P3
64                             2                              -                              Mcu
32832                          0                              2                              Ascend 310P3
32832                          1                              3                              Ascend 310P3
32832                          2                              -                              Mcu
"""
MAPPING_OLD_TIGHT = """NPU ID             Chip ID            Chip Logic ID       Chip Name
96                  0                  4                   MiniD
96                  1                  5                   MiniD
"""
MAPPING_950 = """NPU ID          Slot ID          Chip ID          Chip Phy-ID          Chip Name
0               3                0                0                    Ascend950PR
1               4                0                1                    Ascend950PR
"""


def test_parse_kv_splits_blocks_that_chip_id_closes():
    blocks = parse_kv(USAGES_DUO_TABS)

    assert [block.get("Chip ID") for block in blocks] == [None, "0", "1"]
    assert blocks[2]["DDR Usage Rate(%)"] == "NA"


def test_parse_kv_splits_blocks_that_chip_id_opens():
    blocks = parse_kv(COMMON_910B_SPACES)

    assert [block.get("Chip ID") or block.get("Chip Name") for block in blocks] == [None, "0", "mcu"]
    assert blocks[1]["Aicore curFreq(MHZ)"] == "1650"


def test_parse_kv_keeps_colons_inside_values():
    assert parse_kv(BOARD_CHIP)[0]["PCIe Bus Info"] == "0000:C1:00.0"


def test_parse_kv_skips_log_lines_that_hold_a_colon():
    noisy = "[INFO limiter::manager] [Manager] Registered as Global Manager #0 (PID: 10)\n" + HEALTH_NEW

    assert parse_kv(noisy) == [{"NPU ID": "5", "Health": "OK", "Error Code": "NA", "Error Information": "NA"}]


def test_usages_readings_give_each_chip_its_npu_id_and_memory_in_mb():
    first, second = parse_readings(USAGES_DUO_TABS)

    assert (first.npu_id, first.chip_id, second.npu_id, second.chip_id) == (64, 0, 64, 1)
    assert (first.aicore_pct, first.aicpu_pct, first.memory_total_mb, first.memory_usage_pct) == (
        35,
        2,
        44280,
        10,
    )
    assert first.memory_used_mb == 4428
    assert (second.memory_total_mb, second.memory_usage_pct, second.memory_used_mb) == (43693, None, None)
    assert first.hbm_total_mb is None


def test_usages_readings_on_25x_read_hbm_and_the_new_utilisation_keys():
    (reading,) = parse_readings(USAGES_25X)

    assert (reading.hbm_total_mb, reading.hbm_usage_pct, reading.hbm_used_mb) == (65536, 75, 49152)
    assert (reading.npu_util_pct, reading.aicore_pct) == (46, 40)
    assert reading.raw("Aivector Usage Rate(%)") == "12"


def test_common_readings_read_temperature_power_and_mark_the_mcu():
    chip, mcu = parse_readings(COMMON_910B_SPACES)

    assert (chip.npu_id, chip.chip_id, chip.is_mcu) == (3, 0, False)
    assert (chip.temperature_c, chip.power_w, chip.hbm_usage_pct, chip.aicore_freq_mhz) == (
        52,
        287.4,
        92,
        1650,
    )
    assert (mcu.npu_id, mcu.chip_id, mcu.is_mcu, mcu.temperature_c, mcu.power_w) == (3, None, True, 44, 61.0)


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("Temperature(C)", "48"),
        ("Temperature (C)", "48"),
        ("NPU Temperature (C)", "48"),
        ("Temperature  (C)", "48"),
    ],
)
def test_temperature_reads_every_key_spelling(key, value):
    (reading,) = parse_readings(f"NPU ID : 0\n{key} : {value}\n")

    assert reading.temperature_c == 48


def test_temp_readings_on_a_server_skip_nothing_and_keep_the_mcu_sensors():
    chip, mcu = parse_readings(TEMP_SERVER)

    assert (chip.npu_id, chip.chip_id, chip.temperature_c) == (2, 0, 61)
    assert (mcu.is_mcu, mcu.chip_id, mcu.raw("LM75A_TE (C)")) == (True, None, "33")


def test_health_reads_health_status_and_health_and_takes_ids_from_the_caller():
    (old,) = parse_readings(HEALTH_OLD, npu=7, chip=0)
    (new,) = parse_readings(HEALTH_NEW)

    assert (old.npu_id, old.chip_id, old.health, old.error_code) == (7, 0, "Warning", "80E18008")
    assert (new.npu_id, new.health, new.error_code) == (5, "OK", None)


def test_power_na_on_a_die_is_null():
    (reading,) = parse_readings(POWER_A3_DIE)

    assert (reading.npu_id, reading.chip_id, reading.power_w) == (1, 1, None)


def test_board_readings_give_bus_firmware_and_the_soc_name():
    (board,) = parse_readings(BOARD_CHIP)

    assert (board.npu_id, board.chip_id, board.chip_name, board.soc_name) == (4, 0, "910B3", "Ascend910B3")
    assert (board.bus_id, board.firmware_version) == ("0000:C1:00.0", "7.5.0.3.220")


def test_reading_to_dict_has_every_normalised_field_and_the_raw_fields():
    (reading,) = parse_readings(USAGES_25X)
    as_dict = reading.to_dict()

    assert as_dict["hbm_used_mb"] == 49152
    assert as_dict["temperature_c"] is None
    assert as_dict["fields"]["Aicube Usage Rate(%)"] == "38"


def test_readings_raise_the_npu_smi_message_for_an_unsupported_query():
    with pytest.raises(NpuSmiError) as raised:
        parse_readings("This device does not support querying power.\n")

    assert raised.value.message == "This device does not support querying power."
    assert "power" in raised.value.hint


def test_readings_raise_for_a_header_without_readings():
    with pytest.raises(NpuSmiError, match="no key : value readings found"):
        parse_readings("NPU ID : 0\nChip Count : 1\n")


def test_parse_list_reads_npu_ids_and_chip_counts():
    assert [(npu["npu_id"], npu["chip_count"]) for npu in parse_list(LIST_EIGHT)] == [
        (0, 1),
        (32, 1),
        (96, 1),
    ]


def test_parse_list_reads_the_950_product_and_serial():
    (npu,) = parse_list(LIST_950)

    assert (npu["npu_id"], npu["product_name"], npu["serial_number"]) == (0, "A5 PCIe Card", "102XYZ0001")


def test_parse_list_with_total_count_zero_is_an_empty_list_not_an_error():
    assert parse_list("Total Count                    : 0\n") == []


def test_parse_list_without_npus_or_count_is_an_error():
    with pytest.raises(NpuSmiError, match="no NPU list found"):
        parse_list("Usage: npu-smi info <watch|proc|-h|-m|-l|-t type> [Options...]\n")


def test_mapping_keeps_mcu_rows_with_a_null_logic_id():
    rows = parse_mapping(MAPPING_DUO)

    assert [(r["npu_id"], r["chip_id"], r["logic_id"]) for r in rows] == [
        (64, 0, 0),
        (64, 1, 1),
        (64, 2, None),
        (32832, 0, 2),
        (32832, 1, 3),
        (32832, 2, None),
    ]
    assert [r["chip_name"] for r in rows[:3]] == ["Ascend 310P3", "Ascend 310P3", "Mcu"]


def test_mapping_gives_the_logic_ids_that_visible_devices_need_for_sparse_npu_ids():
    rows = parse_mapping(MAPPING_DUO)
    logic_ids = [r["logic_id"] for r in rows if r["npu_id"] == 32832 and r["logic_id"] is not None]

    assert ",".join(map(str, logic_ids)) == "2,3"


def test_mapping_reads_the_old_tight_spacing():
    assert parse_mapping(MAPPING_OLD_TIGHT) == [
        {"npu_id": 96, "chip_id": 0, "logic_id": 4, "chip_name": "MiniD"},
        {"npu_id": 96, "chip_id": 1, "logic_id": 5, "chip_name": "MiniD"},
    ]


def test_mapping_reads_the_950_slot_and_phy_id_columns_without_a_logic_id():
    assert parse_mapping(MAPPING_950) == [
        {"npu_id": 0, "chip_id": 0, "logic_id": None, "chip_name": "Ascend950PR"},
        {"npu_id": 1, "chip_id": 0, "logic_id": None, "chip_name": "Ascend950PR"},
    ]


def test_mapping_reads_tab_indented_output():
    tabbed = "\n".join("\t" + line for line in MAPPING_OLD_TIGHT.splitlines())

    assert parse_mapping(tabbed) == parse_mapping(MAPPING_OLD_TIGHT)


def test_mapping_raises_the_driver_error():
    with pytest.raises(NpuSmiError, match="-8020"):
        parse_mapping("dcmi model initialized failed, because the device is used. ret is -8020\n")
