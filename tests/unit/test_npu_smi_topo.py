"""`npu-smi info -t topo` read as devices, links and CPU affinity, in the layouts drivers print: the
classic matrix with a CPU Affinity column, newer drivers' NIC columns and rows, and A3's Phy-ID names
without affinity. The matrices here are ours; their form follows the tool's printf layout."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.unit.ascend_samples import read_sample, sample_names
from workers.ascend.npu_smi import NpuSmiError, npu_smi_argv, parse_topo

REPO = Path(__file__).resolve().parents[2]


def matrix(names, rows, affinity=None, nics=(), nic_rows=(), lead="           "):
    """A topo matrix laid out the way npu-smi prints it (names padded to 11, cells to 11)."""
    head = lead + "".join(f"{n:<11}" for n in [*names, *nics])
    head += "CPU Affinity" if affinity else ""
    lines = [head]
    for name, cells in zip(names, rows, strict=True):
        line = f"{name:<11}" + "".join(f"{c:<11}" for c in cells)
        lines.append(line + (affinity[name] if affinity else ""))
    for nic, cells in nic_rows:
        lines.append(f"{nic:<11}" + "".join(f"{c:<11}" for c in cells))
    lines += [
        "",
        "Legend:",
        "",
        "  X    = Self",
        "  HCCS = Connection traversing HCCS.",
        "  NA   = Unknown relationship.",
    ]
    return "\n".join(lines) + "\n"


EIGHT = [f"NPU{i}" for i in range(8)]
EIGHT_ROWS = [["X" if i == j else "HCCS" for j in range(8)] for i in range(8)]
EIGHT_CPUS = {f"NPU{i}": f"{(i // 2) * 40}-{(i // 2) * 40 + 39}" for i in range(8)}


def test_the_classic_matrix_gives_devices_links_and_cpus():
    topo = parse_topo(matrix(EIGHT, EIGHT_ROWS, EIGHT_CPUS))
    assert topo["devices"] == EIGHT
    assert topo["links"]["NPU0"]["NPU0"] == "X"
    assert topo["links"]["NPU3"]["NPU6"] == "HCCS"
    assert set(topo["links"]) == set(EIGHT)
    assert all(len(row) == 8 for row in topo["links"].values())
    assert topo["cpu_affinity"] == EIGHT_CPUS


def test_pcie_cards_with_mixed_paths_keep_each_type():
    names = ["NPU0", "NPU1", "NPU2", "NPU3"]
    rows = [
        ["X", "PIX", "PXB", "SYS"],
        ["PIX", "X", "PHB", "SYS"],
        ["PXB", "PHB", "X", "NA"],
        ["SYS", "SYS", "NA", "X"],
    ]
    topo = parse_topo(matrix(names, rows, {n: "0-23,96-119" for n in names}))
    assert topo["links"]["NPU0"] == {"NPU0": "X", "NPU1": "PIX", "NPU2": "PXB", "NPU3": "SYS"}
    assert topo["links"]["NPU2"]["NPU3"] == "NA"
    assert topo["cpu_affinity"]["NPU3"] == "0-23,96-119"


def test_nic_columns_and_rows_are_not_devices():
    names = ["NPU0", "NPU1"]
    rows = [["X", "UB", "PIX", "SYS"], ["UB", "X", "SYS", "PIX"]]
    text = matrix(
        names, rows, {"NPU0": "0-31", "NPU1": "32-63"}, nics=("NIC0", "NIC1"),
        nic_rows=[("NIC0", ["PIX", "SYS", "X", "NA"]), ("NIC1", ["SYS", "PIX", "NA", "X"])],
    )  # fmt: skip
    text = text.replace("\nLegend:", "\nNIC0: enp189s0f0\nNIC1: enp189s0f1\n\nLegend:")
    topo = parse_topo(text)
    assert topo["devices"] == names
    assert topo["links"] == {"NPU0": {"NPU0": "X", "NPU1": "UB"}, "NPU1": {"NPU0": "UB", "NPU1": "X"}}
    assert topo["cpu_affinity"] == {"NPU0": "0-31", "NPU1": "32-63"}


def test_a3_phy_ids_without_the_affinity_column():
    names = ["Phy-ID0", "Phy-ID1", "Phy-ID2", "Phy-ID3"]
    rows = [
        ["X", "SIO", "HCCS_SW", "HCCS_SW"],
        ["SIO", "X", "HCCS_SW", "HCCS_SW"],
        ["HCCS_SW", "HCCS_SW", "X", "SIO"],
        ["HCCS_SW", "HCCS_SW", "SIO", "X"],
    ]
    topo = parse_topo(matrix(names, rows, lead="\t   "))
    assert topo["devices"] == names
    assert topo["links"]["Phy-ID0"]["Phy-ID1"] == "SIO"
    assert topo["links"]["Phy-ID3"]["Phy-ID0"] == "HCCS_SW"
    assert topo["cpu_affinity"] == {}


def test_a_pasted_matrix_with_a_prompt_before_it_and_trailing_blanks():
    text = "root@a2:~# npu-smi info -t topo\n" + matrix(
        EIGHT[:2], [["X", "HCCS"], ["HCCS", "X"]], {"NPU0": "0-23", "NPU1": "0-23"}
    )
    text = "\n".join(line + "   " for line in text.splitlines())
    topo = parse_topo(text)
    assert topo["devices"] == ["NPU0", "NPU1"]
    assert topo["cpu_affinity"] == {"NPU0": "0-23", "NPU1": "0-23"}


def test_a_failure_or_no_matrix_raises_with_the_hint():
    with pytest.raises(NpuSmiError) as failure:
        parse_topo("dcmi module initialize failed. ret is -8005\n")
    assert "driver" in failure.value.hint
    with pytest.raises(NpuSmiError, match="topology matrix"):
        parse_topo("Legend:\n  X = Self\n")


def test_the_argv_and_the_cli():
    assert npu_smi_argv("topo") == ["npu-smi", "info", "-t", "topo"]
    text = matrix(EIGHT[:2], [["X", "HCCS"], ["HCCS", "X"]], {"NPU0": "0-23", "NPU1": "24-47"})
    result = subprocess.run(
        [sys.executable, "-m", "workers.ascend.npu_smi", "topo", "-"],
        input=text, capture_output=True, text=True, cwd=REPO, timeout=60, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == {
        "devices": ["NPU0", "NPU1"],
        "links": {"NPU0": {"NPU0": "X", "NPU1": "HCCS"}, "NPU1": {"NPU0": "HCCS", "NPU1": "X"}},
        "cpu_affinity": {"NPU0": "0-23", "NPU1": "24-47"},
    }


@pytest.mark.parametrize(
    "name", sample_names("*topo*.txt") or [pytest.param("", marks=pytest.mark.skip("no topo samples"))]
)
def test_topo_samples_read_to_a_square_matrix(name):
    topo = parse_topo(read_sample(name))
    assert topo["devices"]
    for device in topo["devices"]:
        if device in topo["links"]:
            assert topo["links"][device][device] == "X"


OTHER_SAMPLES = [name for name in sample_names("*.txt") if "topo" not in name]


@pytest.mark.parametrize(
    "name", OTHER_SAMPLES or [pytest.param("", marks=pytest.mark.skip(reason="no Ascend samples folder"))]
)
def test_other_npu_smi_outputs_are_refused_with_a_reason_not_misread(name):
    with pytest.raises(NpuSmiError):
        parse_topo(read_sample(name))
