"""`python -m workers.ascend.npu_smi` as other tools call it: JSON on stdout, exit 2 on npu-smi failures."""

# ruff: noqa: E501  (the fixture reproduces a 98-column terminal table)

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

TABLE = """\
+------------------------------------------------------------------------------------------------+
| npu-smi 24.1.rc2                 Version: 24.1.rc2                                             |
+---------------------------+---------------+----------------------------------------------------+
| NPU   Name                | Health        | Power(W)    Temp(C)           Hugepages-Usage(page)|
| Chip                      | Bus-Id        | AICore(%)   Memory-Usage(MB)  HBM-Usage(MB)        |
+===========================+===============+====================================================+
| 32    910B4               | OK            | 93.6        40                0    / 0             |
| 0                         | 0000:C1:00.0  | 3           0    / 0          2871 / 32768         |
+===========================+===============+====================================================+
+---------------------------+---------------+----------------------------------------------------+
| NPU     Chip              | Process id    | Process name             | Process memory(MB)      |
+===========================+===============+====================================================+
| 32      0                 | 2210          | python3.1                | 2650                    |
+===========================+===============+====================================================+
"""

MAPPING = """NPU ID                         Chip ID                        Chip Logic ID                  Chip Name
32                             0                              0                              Ascend 910B4
32                             1                              -                              Mcu
"""


def run_cli(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "workers.ascend.npu_smi", *args],
        input=stdin,
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=60,
        check=False,
    )


def test_table_prints_the_documented_json(tmp_path):
    capture = tmp_path / "npu-smi-info.txt"
    capture.write_text(TABLE)

    result = run_cli("table", str(capture))

    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == {
        "version": "24.1.rc2",
        "chips": [
            {
                "npu_id": 32,
                "chip_id": 0,
                "device_id": None,
                "name": "910B4",
                "health": "OK",
                "power_w": 93.6,
                "temp_c": 40,
                "hugepages_used": 0,
                "hugepages_total": 0,
                "bus_id": "0000:C1:00.0",
                "aicore_pct": 3,
                "memory_used_mb": 0,
                "memory_total_mb": 0,
                "hbm_used_mb": 2871,
                "hbm_total_mb": 32768,
            }
        ],
        "processes": [{"npu_id": 32, "chip_id": 0, "pid": 2210, "name": "python3.1", "memory_mb": 2650}],
    }


def test_table_reads_stdin_when_the_file_is_a_dash():
    result = run_cli("table", "-", stdin=TABLE)

    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["chips"][0]["hbm_used_mb"] == 2871


def test_mapping_prints_rows_with_mcu_logic_id_null():
    result = run_cli("mapping", "-", stdin=MAPPING)

    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == [
        {"npu_id": 32, "chip_id": 0, "logic_id": 0, "chip_name": "Ascend 910B4"},
        {"npu_id": 32, "chip_id": 1, "logic_id": None, "chip_name": "Mcu"},
    ]


@pytest.mark.parametrize("what", ["table", "mapping"])
def test_an_npu_smi_failure_exits_2_with_message_and_hint_on_stderr(what):
    result = run_cli(
        what, "-", stdin="dcmi model initialized failed, because the device is used. ret is -8020\n"
    )

    assert result.returncode == 2
    assert result.stdout == ""
    assert "error: dcmi model initialized failed, because the device is used. ret is -8020" in result.stderr
    assert "hint: " in result.stderr


def test_a_text_without_a_table_exits_2_with_no_npu_table_found():
    result = run_cli("table", "-", stdin="hello\n")

    assert result.returncode == 2
    assert "no NPU table found" in result.stderr


def test_an_unreadable_capture_file_exits_2_and_names_the_file(tmp_path):
    missing = tmp_path / "absent.txt"

    result = run_cli("table", str(missing))

    assert result.returncode == 2
    assert str(missing) in result.stderr


def test_readings_prints_normalised_fields():
    usages = "NPU ID : 32\nChip Count : 1\n\nHBM Capacity(MB) : 32768\nHBM Usage Rate(%) : 50\nChip ID : 0\n"

    result = run_cli("readings", "-", stdin=usages)

    assert result.returncode == 0, result.stderr
    (reading,) = json.loads(result.stdout)
    assert (reading["npu_id"], reading["chip_id"], reading["hbm_used_mb"]) == (32, 0, 16384)
