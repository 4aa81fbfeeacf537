"""The 950's `npu-smi info` layout (split `NPU ID | Name` cells, a process section keyed by NPU ID only) reads
as one chip per block: the process section after the NPU block is not a second NPU, and a 950PR card that
prints two blocks under one NPU ID is two chips of that NPU, not one chip read twice."""

# ruff: noqa: E501  (the tables reproduce the tool's column layout)

from tests.unit.ascend_samples import read_sample
from workers.ascend.npu_smi import parse_table

RULE = "+---------------------------+---------------+-----------------------------------------------------+"
DOUBLE = "+========+==================+===============+=====================================================+"
TWO_NPUS_BUSY = "\n".join(
    [
        "+-------------------------------------------------------------------------------------------------+",
        "| npu-smi 26.0.rc1                        Version: 26.0.rc1                                       |",
        RULE,
        "| NPU ID | Name             | Health        | Power(W)    Temp(C)           Hugepages-Usage(page) |",
        "|        |                  | Bus-Id        | NPU Util(%) Memory-Usage(MB)  HBM-Usage(MB)         |",
        DOUBLE,
        "| 0      | Ascend950PR      | OK            | 311.0       61                0     / 0             |",
        "|        |                  | 0000:91:00.0  | 87          0    / 0          70211 / 86016         |",
        DOUBLE,
        "| 1      | Ascend950PR      | Warning       | 298.2       63                0     / 0             |",
        "|        |                  | 0000:92:00.0  | 85          0    / 0          69870 / 86016         |",
        DOUBLE,
        RULE,
        "| NPU ID                    | Process id    | Process name             | Process memory(MB)       |",
        "+===========================+===============+=====================================================+",
        "| 0                         | 40211         | python3.11               | 65810                    |",
        "| 1                         | 40212         | python3.11               | 65802                    |",
        "+===========================+===============+=====================================================+",
    ]
)


def test_the_950_sample_with_its_process_section_reads_as_one_npu():
    table = parse_table(read_sample("npu-smi-info_950-A5_hwdoc.txt"))
    assert [(c["npu_id"], c["chip_id"]) for c in table["chips"]] == [(0, 0)]
    assert table["processes"] == []


def test_two_busy_950s_are_two_npus_with_one_process_each():
    table = parse_table(TWO_NPUS_BUSY)
    chips = [
        (c["npu_id"], c["chip_id"], c["health"], c["aicore_pct"], c["hbm_used_mb"]) for c in table["chips"]
    ]
    assert chips == [(0, 0, "OK", 87, 70211), (1, 0, "Warning", 85, 69870)]
    assert [(p["npu_id"], p["chip_id"], p["pid"]) for p in table["processes"]] == [
        (0, 0, 40211),
        (1, 0, 40212),
    ]


def test_a_950_block_without_its_closing_rule_before_the_processes_is_still_one_npu():
    lines = TWO_NPUS_BUSY.splitlines()
    cut = lines[:6] + lines[6:8] + lines[12:]  # NPU 1 and the rule after NPU 0 are not in the capture
    table = parse_table("\n".join(cut))
    assert [c["npu_id"] for c in table["chips"]] == [0]
    assert [p["pid"] for p in table["processes"]] == [40211, 40212]


def _block(name, health, bus_id, hbm_used, first_cells=("0", "Ascend950PR"), second_cells=("", "")):
    return [
        f"| {first_cells[0]:<6} | {first_cells[1]:<16} | {health:<13} | 311.0       61                0     / 0             |",
        f"| {second_cells[0]:<6} | {second_cells[1]:<16} | {bus_id:<13} | 87          0    / 0          {hbm_used} / 65536         |",
    ]


def test_a_950pr_card_printing_two_blocks_under_one_npu_id_is_two_chips():
    lines = [
        "| npu-smi 26.0.rc1                        Version: 26.0.rc1                                       |",
        RULE,
        "| NPU ID | Name             | Health        | Power(W)    Temp(C)           Hugepages-Usage(page) |",
        "|        |                  | Bus-Id        | NPU Util(%) Memory-Usage(MB)  HBM-Usage(MB)         |",
        DOUBLE,
        *_block("Ascend950PR", "OK", "0000:91:00.0", 41000),
        RULE,
        *_block("Ascend950PR", "OK", "0000:92:00.0", 42000),
        DOUBLE,
    ]
    chips = parse_table("\n".join(lines))["chips"]
    assert [(c["npu_id"], c["chip_id"], c["bus_id"], c["hbm_used_mb"]) for c in chips] == [
        (0, 0, "0000:91:00.0", 41000),
        (0, 1, "0000:92:00.0", 42000),
    ]


def test_a_950pr_table_with_a_chip_id_row_reads_the_chip_numbers_it_prints():
    lines = [
        "| npu-smi 26.0.rc1                        Version: 26.0.rc1                                       |",
        RULE,
        "| NPU ID | Name             | Health        | Power(W)    Temp(C)           Hugepages-Usage(page) |",
        "| Chip ID| Phy-ID           | Bus-Id        | NPU Util(%) Memory-Usage(MB)  HBM-Usage(MB)         |",
        DOUBLE,
        *_block("Ascend950PR", "OK", "0000:91:00.0", 41000, second_cells=("0", "0")),
        RULE,
        *_block("Ascend950PR", "OK", "0000:92:00.0", 42000, second_cells=("1", "1")),
        DOUBLE,
    ]
    chips = parse_table("\n".join(lines))["chips"]
    assert [(c["npu_id"], c["chip_id"], c["device_id"]) for c in chips] == [(0, 0, 0), (0, 1, 1)]
