"""parse_table over tables composed to cover every layout npu-smi has printed in the field."""

import pytest

from tests.npu_smi_tables import (
    A3,
    ASCEND_950,
    DUO_310P,
    OLD_20X_80_COLUMNS,
    PRO_B_93_COLUMNS,
    SOC_310B,
    TWO_DIGIT_IDS,
    VNPU_IN_CONTAINER,
    WIDE_26X,
)
from workers.ascend.npu_smi import CHIP_FIELDS, PROCESS_FIELDS, NpuSmiError, parse_table
from workers.ascend.npu_smi_values import used_total


def chip(table: dict, npu_id: int, chip_id: int = 0) -> dict:
    (found,) = [c for c in table["chips"] if (c["npu_id"], c["chip_id"]) == (npu_id, chip_id)]
    return found


def test_it_reads_the_116_column_26x_layout_with_a_fifth_process_column():
    table = parse_table(WIDE_26X)

    assert table["version"] == "26.1.0"
    assert [(c["npu_id"], c["hbm_used_mb"], c["hbm_total_mb"]) for c in table["chips"]] == [
        (0, 53984, 65536),
        (1, 5239, 65536),
    ]
    assert table["processes"] == [
        {"npu_id": 0, "chip_id": 0, "pid": 1712733, "name": "python", "memory_mb": 48954},
        {"npu_id": 0, "chip_id": 0, "pid": 1712740, "name": None, "memory_mb": 1024},
    ]


def test_it_ignores_driver_and_profiling_noise_before_the_table():
    assert WIDE_26X.startswith("DrvMngGetConsoleLogLevel failed")
    table = parse_table(WIDE_26X)

    assert len(table["chips"]) == 2
    assert chip(table, 0)["power_w"] == 93.6


def test_it_ignores_vnpu_limiter_logs_and_reads_container_ids():
    table = parse_table(VNPU_IN_CONTAINER)

    assert [(c["npu_id"], c["chip_id"], c["device_id"]) for c in table["chips"]] == [
        (32832, 0, 0),
        (32832, 1, 1),
    ]
    assert (chip(table, 32832, 0)["memory_used_mb"], chip(table, 32832, 0)["memory_total_mb"]) == (0, 8192)
    # "NA / 8192": the quota is known, the use is not.
    assert (chip(table, 32832, 1)["memory_used_mb"], chip(table, 32832, 1)["memory_total_mb"]) == (None, 8192)


def test_it_reads_a_table_without_its_final_separator():
    table = parse_table(TWO_DIGIT_IDS)

    assert TWO_DIGIT_IDS.rstrip().endswith(
        "NPU 11                                                           |"
    )
    assert [c["npu_id"] for c in table["chips"]] == [9, 10, 11]
    assert table["processes"] == [
        {"npu_id": 10, "chip_id": 0, "pid": 3391022, "name": "VLLMWorker_TP0", "memory_mb": 24013}
    ]


def test_it_reads_two_digit_npu_ids_whose_padding_shifts_the_columns():
    table = parse_table(TWO_DIGIT_IDS)

    assert (chip(table, 10)["hbm_used_mb"], chip(table, 10)["aicore_pct"], chip(table, 10)["temp_c"]) == (
        27456,
        12,
        44,
    )
    assert (chip(table, 11)["health"], chip(table, 11)["power_w"], chip(table, 11)["hbm_used_mb"]) == (
        "Warning",
        101.7,
        3389,
    )


def test_it_reads_power_na_on_310p_as_null_not_zero():
    table = parse_table(DUO_310P)

    assert [c["power_w"] for c in table["chips"]] == [None, None, None, None]
    assert chip(table, 32, 0)["temp_c"] == 52


def test_it_reads_power_dash_on_the_a3_second_die_as_null():
    table = parse_table(A3)

    assert [(c["npu_id"], c["chip_id"], c["power_w"]) for c in table["chips"]] == [
        (0, 0, 172.4),
        (0, 1, None),
        (1, 0, 168.0),
        (1, 1, None),
    ]


def test_it_pairs_two_chips_per_npu_across_inner_dashed_separators():
    duo = parse_table(DUO_310P)
    a3 = parse_table(A3)

    assert [(c["npu_id"], c["chip_id"], c["bus_id"]) for c in duo["chips"]] == [
        (32, 0, "0000:01:00.0"),
        (32, 1, "0000:02:00.0"),
        (96, 0, "0000:81:00.0"),
        (96, 1, "0000:82:00.0"),
    ]
    assert [c["hbm_used_mb"] for c in a3["chips"]] == [31003, 10568, 2876, 2876]


def test_it_reads_device_id_under_chip_device_and_chip_phy_id_and_null_under_chip_alone():
    assert [c["device_id"] for c in parse_table(DUO_310P)["chips"]] == [0, 1, 2, 3]
    assert [c["device_id"] for c in parse_table(A3)["chips"]] == [0, 1, 2, 3]
    assert [c["device_id"] for c in parse_table(OLD_20X_80_COLUMNS)["chips"]] == [4, 5]
    assert [c["device_id"] for c in parse_table(TWO_DIGIT_IDS)["chips"]] == [None, None, None]


def test_it_reads_the_950_split_cells_with_npu_util_and_chip_zero():
    table = parse_table(ASCEND_950)

    assert table["version"] == "26.0.rc1"
    assert chip(table, 0) == {
        "npu_id": 0,
        "chip_id": 0,
        "device_id": None,
        "name": "Ascend950PR",
        "health": "OK",
        "power_w": 304.4,
        "temp_c": 56,
        "hugepages_used": 0,
        "hugepages_total": 0,
        "bus_id": "0000:91:00.0",
        "aicore_pct": 35,
        "memory_used_mb": 0,
        "memory_total_mb": 0,
        "hbm_used_mb": 5239,
        "hbm_total_mb": 131072,
    }


def test_it_reads_na_readings_as_null():
    failing = chip(parse_table(ASCEND_950), 1)

    assert (failing["health"], failing["power_w"], failing["temp_c"], failing["aicore_pct"]) == (
        "Critical",
        None,
        None,
        None,
    )
    assert (failing["hbm_used_mb"], failing["hbm_total_mb"]) == (None, 131072)


def test_it_reads_950_processes_keyed_by_npu_id_only_as_chip_zero():
    table = parse_table(ASCEND_950)

    assert [(p["npu_id"], p["chip_id"], p["pid"], p["name"]) for p in table["processes"]] == [
        (0, 0, 3391022, "python"),
        (0, 0, 3391030, "VLLMWorker_TP1"),
    ]


def test_it_keeps_memory_and_hbm_columns_apart():
    wide = chip(parse_table(WIDE_26X), 0)
    pro_b = chip(parse_table(PRO_B_93_COLUMNS), 0)
    duo = chip(parse_table(DUO_310P), 96, 1)

    # 910B / A3 / 950: DDR printed as 0 / 0, the device memory is the HBM column.
    assert (wide["memory_used_mb"], wide["memory_total_mb"], wide["hbm_total_mb"]) == (0, 0, 65536)
    # 910A / 910ProB: both columns carry figures.
    assert (pro_b["memory_used_mb"], pro_b["memory_total_mb"]) == (3616, 15039)
    assert (pro_b["hbm_used_mb"], pro_b["hbm_total_mb"]) == (29870, 32768)
    # 310 / 310P / 310B: no HBM column at all.
    assert (duo["memory_used_mb"], duo["memory_total_mb"], duo["hbm_used_mb"], duo["hbm_total_mb"]) == (
        1533,
        44280,
        None,
        None,
    )


@pytest.mark.parametrize(
    ("printed", "expected"),
    [
        ("3360 / 65536", (3360, 65536)),
        ("65099/ 65536", (65099, 65536)),
        ("0    / 8192", (0, 8192)),
        ("5239  / 131072", (5239, 131072)),
        ("1232 /1232", (1232, 1232)),
        ("NA / 8192", (None, 8192)),
        ("NA", (None, None)),
        ("", (None, None)),
    ],
)
def test_it_reads_used_and_total_whatever_the_spacing(printed, expected):
    assert used_total(printed) == expected


def test_it_reads_hugepages_in_use():
    assert (
        chip(parse_table(PRO_B_93_COLUMNS), 0)["hugepages_used"],
        chip(parse_table(SOC_310B), 0)["hugepages_total"],
    ) == (
        1232,
        15,
    )


def test_it_lists_several_processes_per_chip_and_the_same_pid_on_two_chips():
    table = parse_table(A3)

    assert [(p["npu_id"], p["chip_id"], p["pid"], p["memory_mb"]) for p in table["processes"]] == [
        (0, 0, 4242, 28160),
        (0, 0, 4250, 2048),
        (0, 1, 4242, 7680),
    ]
    assert {p["name"] for p in table["processes"]} == {"python3.1"}


def test_it_reads_the_20x_layout_without_hugepages_or_processes():
    table = parse_table(OLD_20X_80_COLUMNS)

    assert table["version"] == "20.1.0"
    assert table["processes"] == []
    assert [(c["npu_id"], c["chip_id"], c["aicore_pct"], c["memory_used_mb"]) for c in table["chips"]] == [
        (3, 0, 0, 2703),
        (3, 1, 20, 2704),
    ]
    assert {(c["hugepages_used"], c["hugepages_total"]) for c in table["chips"]} == {(None, None)}


def test_it_reads_a_soc_board_with_bus_id_na_and_alarm_health():
    soc = chip(parse_table(SOC_310B), 0)

    assert (soc["bus_id"], soc["health"], soc["power_w"], soc["memory_total_mb"]) == (
        None,
        "Alarm",
        0.0,
        15609,
    )


def test_it_reads_tables_with_trailing_spaces_and_paste_indentation():
    padded = "\n".join(f"    {line} " for line in A3.splitlines())

    assert parse_table(padded) == parse_table(A3)


def test_it_reports_numbers_as_numbers_and_power_as_float():
    table = parse_table(WIDE_26X)
    one = chip(table, 1)

    assert isinstance(one["power_w"], float)
    assert isinstance(chip(parse_table(A3), 1)["power_w"], float)  # 168.0 stays a float
    assert all(
        isinstance(one[field], int) for field in ("npu_id", "chip_id", "temp_c", "aicore_pct", "hbm_total_mb")
    )


def test_it_takes_column_meaning_from_the_header_not_the_position():
    # Temp before Power, HBM before Memory: a future layout must still land in the right fields.
    reordered = (
        OLD_20X_80_COLUMNS.replace("Power(W)          Temp(C)", "Temp(C)           Power(W)")
        .replace("8.0               48", "48                8.0")
        .replace("8.0               49", "49                8.0")
    )

    table = parse_table(reordered)

    assert [(c["temp_c"], c["power_w"]) for c in table["chips"]] == [(48, 8.0), (49, 8.0)]


def test_every_chip_and_process_carries_exactly_the_public_fields():
    for fixture in (WIDE_26X, ASCEND_950, TWO_DIGIT_IDS, DUO_310P, A3, PRO_B_93_COLUMNS, OLD_20X_80_COLUMNS):
        table = parse_table(fixture)
        assert set(table) == {"version", "chips", "processes"}
        assert all(tuple(c) == CHIP_FIELDS for c in table["chips"])
        assert all(tuple(p) == PROCESS_FIELDS for p in table["processes"])


def test_it_raises_no_npu_table_found_for_text_without_a_table_or_known_error():
    with pytest.raises(NpuSmiError, match="no NPU table found") as raised:
        parse_table("Welcome to the Ascend host\nsomething unexpected\n")

    assert "something unexpected" in raised.value.message
    assert raised.value.hint


def test_it_raises_the_driver_error_instead_of_returning_an_empty_table():
    text = "DrvMngGetConsoleLogLevel failed. (ret=4)\ndcmi module initialize failed. ret is -8005\n"

    with pytest.raises(NpuSmiError) as raised:
        parse_table(text)

    assert raised.value.message == "dcmi module initialize failed. ret is -8005"
    assert "/dev/davinci" in raised.value.hint


def test_a_table_header_without_chip_rows_is_an_error():
    header_only = "\n".join(OLD_20X_80_COLUMNS.splitlines()[:6])

    with pytest.raises(NpuSmiError, match="no NPU table found"):
        parse_table(header_only)
