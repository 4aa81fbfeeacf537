"""Per-chip health faults of the sim host (`python -m workers.sim fault --npu N ...`), read back by the health
readers the agent uses: what the sim prints for each must be what those readers know from the field."""

import subprocess
import sys

import pytest

from workers.ascend.hccn import parse as parse_hccn
from workers.ascend.npu_health import device_gone, ecc_delta, link_flaps, parse_ecc, parse_health
from workers.ascend.npu_smi import parse_table
from workers.sim.tree import create_host


@pytest.fixture
def a2(tmp_path):
    create_host(tmp_path, "atlas-800i-a2")
    return tmp_path


def run(root, tool: str, *args: str) -> subprocess.CompletedProcess:
    path = root / "bin" / tool
    if not path.exists():
        path = root / "usr/local/Ascend/driver/tools" / tool
    return subprocess.run([str(path), *args], capture_output=True, text=True, timeout=30, check=False)


def fault(root, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "workers.sim", "fault", "--root", str(root), *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=30, check=check)


def test_critical_health_shows_in_the_table_and_with_a_code_in_t_health(a2):
    fault(a2, "--npu", "2", "--health", "Critical")
    chips = parse_table(run(a2, "npu-smi", "info").stdout)["chips"]
    assert [chip["health"] for chip in chips].count("Critical") == 1
    health = parse_health(run(a2, "npu-smi", "info", "-t", "health", "-i", "2").stdout)
    assert health["health"] == "Critical"
    assert health["error_codes"] == ["80E18402"]


def test_an_ecc_burst_grows_the_double_bit_counts_and_shows_a_code(a2):
    before = parse_ecc(run(a2, "npu-smi", "info", "-t", "ecc", "-i", "1").stdout)
    assert before["hbm_double"] == 0
    fault(a2, "--npu", "1", "--ecc-burst", "3")
    fault(a2, "--npu", "1", "--ecc-burst", "5", "--single-bit")
    after = parse_ecc(run(a2, "npu-smi", "info", "-t", "ecc", "-i", "1").stdout)
    delta = ecc_delta(before, after)
    assert (delta["hbm_double"], delta["hbm_single"], after["hbm_double_isolated_pages"]) == (3, 5, 3)
    health = parse_health(run(a2, "npu-smi", "info", "-t", "health", "-i", "1").stdout)
    assert (health["health"], health["error_codes"]) == ("Warning", ["80E18400"])


def test_a_link_that_goes_down_and_up_again_counts_a_flap(a2):
    def link_up_count():
        return parse_hccn(run(a2, "hccn_tool", "-i", "3", "-link_stat", "-g").stdout, "link_stat")[0]

    first = link_up_count()["link_up_count"]
    fault(a2, "--npu", "3", "--link-down")
    assert parse_hccn(run(a2, "hccn_tool", "-i", "3", "-link", "-g").stdout, "link") == [{"link": "DOWN"}]
    fault(a2, "--npu", "3", "--link-up")
    assert link_flaps(first, link_up_count()["link_up_count"]) == 1


def test_a_chip_that_is_gone_leaves_the_table_and_says_so_when_asked(a2):
    fault(a2, "--npu", "5", "--chip-gone")
    chips = parse_table(run(a2, "npu-smi", "info").stdout)["chips"]
    assert 5 not in [chip["npu_id"] for chip in chips]
    assert len(chips) == 7
    health = run(a2, "npu-smi", "info", "-t", "health", "-i", "5").stdout
    assert parse_health(health)["health"] == "UNKNOWN"
    assert device_gone(health)
    assert device_gone(run(a2, "npu-smi", "info", "-t", "ecc", "-i", "5").stdout)
    assert device_gone(run(a2, "hccn_tool", "-i", "5", "-link", "-g").stdout)
    fault(a2, "--npu", "5", "--chip-back")
    assert len(parse_table(run(a2, "npu-smi", "info").stdout)["chips"]) == 8


def test_clear_forgets_every_chip_fault(a2):
    fault(a2, "--npu", "0", "--ecc-burst", "2")
    fault(a2, "--npu", "1", "--chip-gone")
    fault(a2, "--clear")
    assert parse_ecc(run(a2, "npu-smi", "info", "-t", "ecc", "-i", "0").stdout)["hbm_double"] == 0
    assert len(parse_table(run(a2, "npu-smi", "info").stdout)["chips"]) == 8


def test_a_chip_fault_needs_one_fault_and_an_npu(a2):
    result = fault(a2, "--npu", "0", "--chip-gone", "--link-down", check=False)
    assert result.returncode == 1
    assert "one of" in result.stderr
