"""The compatibility matrix: documented sets pass, mismatches name the fix, undocumented is never fine."""

import json
import subprocess
import sys

import pytest

from workers.ascend.compat import MatrixError, check, load_matrix, profile_for
from workers.ascend.vercmp import Version, VersionError, compare, matches_series, same

ROWS = [
    # vllm-ascend, vllm, cann, torch, torch-npu, python in range, python out of range
    ("0.23.0", "0.23.0", "9.1.0", "2.10.0", "2.10.0.post4", "3.12", "3.13"),
    ("0.18.0", "0.18.0", "8.5.1", "2.9.0", "2.9.0.post1", "3.11", "3.12"),
    ("0.13.0", "0.13.0", "8.5.0", "2.8.0", "2.8.0.post2", "3.10", "3.9"),
    ("0.11.0", "0.11.0", "8.3.RC2", "2.7.1", "2.7.1.post1", "3.9", "3.12"),
    ("0.9.1", "0.9.1", "8.2.RC1", "2.5.1", "2.5.1.post1", "3.11", "3.8"),
    ("0.7.3", "0.7.3", "8.1.RC1", "2.5.1", "2.5.1", "3.10", "3.12"),
]


@pytest.mark.parametrize(("vllm_ascend", "vllm", "cann", "torch", "torch_npu", "python", "_"), ROWS)
def test_every_documented_row_is_ok(vllm_ascend, vllm, cann, torch, torch_npu, python, _):
    verdict = check(
        vllm_ascend=vllm_ascend,
        vllm=vllm,
        cann=cann,
        torch=torch,
        torch_npu=torch_npu,
        python=python,
        chip="910b",
    )
    assert verdict.to_dict() == {"ok": True, "profile": f"vllm-ascend-{vllm_ascend}", "problems": []}


@pytest.mark.parametrize(("vllm_ascend", "vllm", "cann", "torch", "torch_npu", "_", "python"), ROWS)
def test_every_row_rejects_a_python_outside_its_range(vllm_ascend, vllm, cann, torch, torch_npu, _, python):
    verdict = check(vllm_ascend=vllm_ascend, python=python)
    assert not verdict.ok
    assert [p.component for p in verdict.problems] == ["python"]


def test_the_matrix_holds_the_six_starting_rows_with_sources():
    profiles = load_matrix()
    assert [p.vllm_ascend for p in profiles] == [row[0] for row in ROWS]
    assert all(p.sources and all(s.startswith("https://") for s in p.sources) for p in profiles)
    assert profile_for("0.23.0").triton_ascend == "3.2.2"
    assert profile_for("0.11.0").triton_ascend is None
    assert profile_for("v0.13.0").cann == "8.5.0"


def test_a_wrong_cann_names_the_version_to_install():
    verdict = check(vllm_ascend="0.11.0", cann="8.2.RC1")
    assert not verdict.ok
    (problem,) = verdict.problems
    assert (problem.component, problem.have, problem.need, problem.kind) == (
        "cann",
        "8.2.RC1",
        "8.3.RC2",
        "mismatch",
    )
    assert "install 8.3.RC2" in problem.hint


def test_several_mismatches_are_all_reported():
    verdict = check(vllm_ascend="0.13.0", vllm="0.12.0", torch="2.9.0", torch_npu="2.8.0.post1")
    assert [p.component for p in verdict.problems] == ["vllm", "torch", "torch-npu"]


def test_cann_and_torch_npu_spellings_are_compared_as_versions():
    assert check(vllm_ascend="0.11.0", cann="8.3.rc2", torch_npu="2.7.1.post1").ok
    assert check(vllm_ascend="0.18.0", torch_npu="2.9.0.post1+git4c901a4", torch="2.9.0+cpu").ok


def test_an_unknown_release_is_unverified_with_no_profile():
    verdict = check(vllm_ascend="0.10.0rc1", cann="8.2.RC1")
    assert verdict.to_dict()["profile"] is None
    (problem,) = verdict.problems
    assert (problem.component, problem.kind) == ("vllm-ascend", "unverified")
    assert "0.23.0" in problem.need


def test_a_chip_nobody_supports_is_rejected_with_the_reason():
    for chip in ("910", "310b"):
        (problem,) = check(vllm_ascend="0.23.0", chip=chip).problems
        assert (problem.component, problem.kind) == ("chip", "unsupported")
        assert "unplanned" in problem.hint


def test_a_chip_a_newer_release_supports_points_to_it():
    (problem,) = check(vllm_ascend="0.7.3", chip="310p").problems
    assert problem.component == "chip"
    assert "vllm-ascend-0.11.0" in problem.hint
    assert check(vllm_ascend="0.9.1", chip="a3").ok


def test_a_documented_driver_passes_and_one_outside_the_list_fails():
    assert check(vllm_ascend="0.13.0", driver="25.5.0").ok
    assert check(vllm_ascend="0.13.0", driver="25.0.rc1.1").ok
    assert check(vllm_ascend="0.23.0", driver="26.0.rc1").ok
    (problem,) = check(vllm_ascend="0.23.0", driver="25.0.1").problems
    assert (problem.component, problem.kind) == ("driver", "mismatch")
    assert "25.2.x" in problem.need


def test_a_driver_minimum_uses_version_order():
    assert check(vllm_ascend="0.7.3", driver="24.1.rc2").ok
    assert check(vllm_ascend="0.7.3", driver="24.1.0").ok
    assert not check(vllm_ascend="0.7.3", driver="23.0.7").ok


def test_an_undocumented_driver_pairing_is_unverified_not_fine():
    verdict = check(vllm_ascend="0.18.0", driver="25.5.0")
    assert not verdict.ok
    (problem,) = verdict.problems
    assert (problem.component, problem.kind) == ("driver", "unverified")
    assert "8.5.1" in problem.hint


def test_version_order_handles_huawei_and_pep440_spellings():
    assert Version("8.3.RC2") < Version("8.3.0") < Version("8.5.0")
    assert Version("8.0.RC3") < Version("8.0.0") < Version("8.1.RC1")
    assert Version("8.2.RC1") < Version("8.3.RC1") < Version("8.3.RC2")
    assert Version("24.1.rc1") < Version("24.1.rc2") < Version("24.1.0") < Version("25.0.rc1")
    assert Version("23.0.7") < Version("24.1.rc1")
    assert Version("2.5.1") < Version("2.5.1.post1") < Version("2.5.2")
    assert Version("2.5.1.post1.dev20250528") < Version("2.5.1.post1")
    assert Version("9.1.0-beta.3") < Version("9.1.0")
    assert compare("8.5.0", "8.5") == 0
    assert same("8.3.rc2", "8.3.RC2")
    assert same("v0.9.1", "0.9.1")


def test_series_patterns_match_whole_parts_only():
    assert matches_series("25.5.0.1", "25.5.x")
    assert matches_series("25.0.rc1.1", "25.0.x")
    assert not matches_series("25.2.0", "25.0.x")
    assert not matches_series("25.50.0", "25.5.x")
    assert matches_series("26.0.RC1", "26.0.rc1")


def test_garbage_is_not_a_version():
    with pytest.raises(VersionError):
        Version("latest")
    (problem,) = check(vllm_ascend="0.11.0", cann="unknown").problems
    assert problem.component == "cann"


def test_a_malformed_matrix_names_the_row_and_field(tmp_path):
    bad = tmp_path / "matrix.yaml"
    bad.write_text("profiles:\n  - vllm_ascend: '9.9.9'\n    vllm: '9.9.9'\n")
    with pytest.raises(MatrixError, match=r"profiles\[0\] \(9.9.9\): field 'python' is missing"):
        load_matrix(bad)


def test_the_cli_prints_the_verdict_as_json_and_exits_nonzero_when_not_ok():
    argv = [sys.executable, "-m", "workers.ascend.compat", "--vllm-ascend", "0.11.0", "--cann", "8.3.RC2"]
    ok = subprocess.run([*argv, "--chip", "910b"], capture_output=True, text=True, check=False)
    assert ok.returncode == 0
    assert json.loads(ok.stdout) == {"ok": True, "profile": "vllm-ascend-0.11.0", "problems": []}
    bad = subprocess.run(
        [*argv, "--python", "3.12", "--driver", "25.3.rc1"], capture_output=True, text=True, check=False
    )
    assert bad.returncode == 1
    problems = json.loads(bad.stdout)["problems"]
    assert {p["component"] for p in problems} == {"python", "driver"}
    assert all({"component", "have", "need", "hint"} <= set(p) for p in problems)
