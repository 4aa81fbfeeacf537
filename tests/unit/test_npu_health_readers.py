"""The NPU health readers (workers.ascend.npu_health) on text shaped as npu-smi prints it: TAB, the key padded
to 30 (health) or 40 (ecc) columns, ` : `, the value; codes as ` %04X` each; a further Error Information on a
line whose key is blank. The texts are written here, not captured (captures stay in ../shared/ascend-samples);
the last tests run the readers over every capture there is."""

import pytest

from tests.unit.ascend_samples import read_sample, sample_names
from workers.ascend.hccn import parse
from workers.ascend.npu_fault_codes import FAULT_CODES, LEVELS, describe
from workers.ascend.npu_health import (
    device_gone,
    ecc_delta,
    link_flaps,
    parse_ecc,
    parse_ecc_chips,
    parse_health,
)
from workers.ascend.npu_smi_errors import NpuSmiError


def kv(key: str, value, width: int = 30) -> str:
    return f"\t{key:<{width}} : {value}"


HEALTH_TWO_CODES = "\n".join(
    [
        kv("Health Status", "Alarm"),
        kv("Error Code", "80E18402 80C98000"),
        kv(
            "Error Information",
            "node type=HBM, sensor type=Memory, event state=uncorrectable ECC isolated 64",
        ),
        kv("", "node type=AICORE, sensor type=Processor, event state=instruction check failed"),
    ]
)


def test_health_with_two_codes_reads_both_codes_and_both_texts():
    health = parse_health(HEALTH_TWO_CODES)
    assert health["health"] == "Alarm"
    assert health["error_codes"] == ["80E18402", "80C98000"]
    assert len(health["information"]) == 2
    assert health["information"][1].startswith("node type=AICORE")


def test_codes_separated_by_commas_are_read_too():
    text = kv("Health Status", "Alarm") + "\n" + kv("Error Code", "80E18402,0x80c98000") + "\n"
    assert parse_health(text)["error_codes"] == ["80E18402", "80C98000"]


def test_health_of_an_older_driver_has_no_information_line_and_na_code():
    health = parse_health(kv("Health Status", "OK") + "\n" + kv("Error Code", "NA") + "\n")
    assert health == {"npu_id": None, "health": "OK", "error_codes": [], "information": []}


def test_health_of_950_says_health_not_health_status_and_gives_its_npu_id():
    text = "\n".join(["        " + line.lstrip("\t") for line in (kv("NPU ID", 3), kv("Health", "Critical"))])
    text += "\n" + kv("Error Code", "0x80e18404") + "\n" + kv("Error Information", "NA") + "\n"
    health = parse_health(text)
    assert (health["npu_id"], health["health"], health["error_codes"]) == (3, "Critical", ["80E18404"])


def test_health_unknown_is_a_device_that_is_gone():
    text = kv("Health Status", "UNKNOWN") + "\n" + kv("Error Code", "NA") + "\n"
    assert parse_health(text)["health"] == "UNKNOWN"
    assert device_gone(text)
    assert not device_gone(HEALTH_TWO_CODES)


def test_an_npu_smi_failure_is_raised_not_read_as_health():
    with pytest.raises(NpuSmiError, match="-8005"):
        parse_health("dcmi module initialize failed. ret is -8005\n")
    with pytest.raises(NpuSmiError, match="does not exist"):
        parse_health("The device does not exist.\n")


ECC_910B = "\n".join(
    [
        kv("NPU ID", 0, 40),
        kv("Chip Count", 1, 40),
        "",
        kv("DDR Single Bit Error Count", 0, 40),
        kv("DDR Double Bit Error Count", 0, 40),
        kv("HBM Single Bit Error Count", 12, 40),
        kv("HBM Double Bit Error Count", 1, 40),
        kv("HBM Single Bit Aggregate Total Err Cnt", 340, 40),
        kv("HBM Double Bit Aggregate Total Err Cnt", 2, 40),
        kv("HBM Single Bit Isolated Pages Count", 0, 40),
        kv("HBM Double Bit Isolated Pages Count", 2, 40),
        kv("Chip ID", 0, 40),
    ]
)


def test_ecc_of_a_910b_reads_hbm_and_ddr_counts():
    ecc = parse_ecc(ECC_910B)
    assert (ecc["npu_id"], ecc["hbm_single"], ecc["hbm_double"]) == (0, 12, 1)
    assert (ecc["hbm_single_total"], ecc["hbm_double_total"], ecc["hbm_double_isolated_pages"]) == (340, 2, 2)
    assert (ecc["ddr_single"], ecc["ddr_double"], ecc["ddr_single_total"]) == (0, 0, None)


def test_ecc_of_a_310_names_its_ddr_counts_without_ddr():
    ecc = parse_ecc(kv("Single-bit Error Count", 4, 40) + "\n" + kv("Double-bit Error Count", 0, 40) + "\n")
    assert (ecc["ddr_single"], ecc["ddr_double"], ecc["hbm_single"]) == (4, 0, None)


def test_ecc_counts_out_of_range_or_na_are_unknown():
    ecc = parse_ecc(
        kv("HBM Single Bit Error Count", "NA", 40) + "\n" + kv("HBM Double Bit Error Count", 2**33, 40)
    )
    assert ecc["hbm_single"] is None
    assert ecc["hbm_double"] is None


def test_ecc_query_the_chip_does_not_support_raises_with_the_hint():
    with pytest.raises(NpuSmiError, match="does not support"):
        parse_ecc("This device does not support querying ecc.\n")


def test_ecc_delta_counts_growth_and_a_cleared_counter_as_all_new():
    before = parse_ecc(ECC_910B)
    after = dict(before, hbm_double=4, hbm_single=3, hbm_single_total=343)
    assert ecc_delta(None, after) == {}
    delta = ecc_delta(before, after)
    assert (delta["hbm_double"], delta["hbm_single"], delta["hbm_single_total"]) == (3, 3, 3)
    assert delta["ddr_single"] == 0
    assert "ddr_single_total" not in delta


def test_link_flaps_from_link_up_counts():
    records = parse("[device 0]link up count : 3\n[device 1]link up count : 7\n", "link_stat")
    assert [record["link_up_count"] for record in records] == [3, 7]
    assert link_flaps(3, 5) == 2
    assert link_flaps(None, 5) == 0
    assert link_flaps(9, 1) == 1


def test_link_state_down_is_read_by_the_hccn_reader():
    assert parse("link status: DOWN\n", "link") == [{"link": "DOWN"}]


def test_hccn_and_npu_smi_gone_answers():
    assert device_gone("The device is not exist!\n")
    assert device_gone("dcmi get device health failed. ret is -8008\n")
    assert not device_gone("dcmi module initialize failed. ret is -8005\n")
    assert not device_gone("link status: UP\n")


def test_the_fault_code_table_is_complete_and_cites_its_sources():
    assert describe("0x80e18402").level == "SeparateNPU"
    assert describe("DEADBEEF") is None
    for code, fault in FAULT_CODES.items():
        assert len(code) == 8
        assert code == code.upper()
        assert fault.level in LEVELS
        assert fault.meaning
        assert fault.source.startswith("https://")


@pytest.mark.parametrize("name", sample_names("npu-smi-info-t-health*") or ["(none)"])
def test_every_health_capture_parses(name):
    health = parse_health(read_sample(name))
    assert health["health"] in ("OK", "Warning", "Alarm", "Critical", "UNKNOWN")
    assert all(len(code) >= 4 for code in health["error_codes"])


@pytest.mark.parametrize("name", sample_names("*ecc*") or ["(none)"])
def test_every_ecc_capture_parses(name):
    ecc = parse_ecc(read_sample(name))
    assert any(value is not None for key, value in ecc.items() if key != "npu_id")


@pytest.mark.parametrize("name", sample_names("hccn*link*") or ["(none)"])
def test_every_hccn_link_capture_parses(name):
    text = read_sample(name)
    query = "link_stat" if "link up count" in text else "link"
    assert parse(text, query)


@pytest.mark.parametrize("name", sample_names("npu-smi-*") or ["(none)"])
def test_no_capture_of_a_working_host_reads_as_a_device_that_is_gone(name):
    assert not device_gone(read_sample(name))


def test_ecc_of_a_two_chip_npu_is_read_per_chip():
    second = ECC_910B.replace(
        kv("HBM Double Bit Error Count", 1, 40), kv("HBM Double Bit Error Count", 9, 40)
    )
    second = second.replace(kv("Chip ID", 0, 40), kv("Chip ID", 1, 40))
    chips = parse_ecc_chips(ECC_910B + "\n" + second.split("\n\n", 1)[1])
    assert {chip: counts["hbm_double"] for chip, counts in chips.items()} == {0: 1, 1: 9}
    assert set(parse_ecc_chips(kv("HBM Double Bit Error Count", 2, 40))) == {None}


def test_the_command_line_reads_health_and_ecc_captures(tmp_path, capsys):
    import json

    from workers.ascend.npu_smi import main

    health = tmp_path / "health.txt"
    health.write_text(HEALTH_TWO_CODES)
    assert main(["health", str(health)]) == 0
    assert json.loads(capsys.readouterr().out)["error_codes"] == ["80E18402", "80C98000"]
    ecc = tmp_path / "ecc.txt"
    ecc.write_text(ECC_910B)
    assert main(["ecc", str(ecc)]) == 0
    assert json.loads(capsys.readouterr().out)["chips"]["0"]["hbm_double"] == 1
