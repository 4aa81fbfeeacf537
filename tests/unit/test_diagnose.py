import io
import json
from pathlib import Path

import pytest

from workers.ascend.diagnose import MAX_QUOTED_CHARS, diagnose, diagnose_lines, main
from workers.ascend.signatures import SIGNATURES

SAMPLES = Path(__file__).resolve().parents[2].parent / "shared" / "ascend-samples"
FIXTURES = Path(__file__).resolve().parent / "data" / "diagnose"


def sample(name: str) -> str:
    path = SAMPLES / name
    if not path.exists():
        pytest.skip(f"{path} is absent")
    return path.read_text()


def codes(findings: list[dict]) -> list[str]:
    return [finding["code"] for finding in findings]


def test_it_names_the_captured_npu_oom_at_its_first_line():
    findings = diagnose(sample("vllm-error_npu-oom_01.txt"))
    assert codes(findings) == ["npu_oom"]
    assert findings[0]["line_no"] == 1
    assert findings[0]["line"].startswith(
        "NPU out of memory. NPUWorkspaceAllocator tried to allocate 180.00 MiB"
    )
    assert findings[0]["title"] == "NPU out of memory"
    assert "gpu-memory-utilization" in findings[0]["hint"]


def test_the_captured_healthy_startup_has_no_findings():
    text = sample("vllm-serve-startup_ascend_v1_01.txt")
    assert "Failed to import from vllm._C" in text  # the usual warning is there and is not a failure
    assert diagnose(text) == []


def test_a_healthy_graph_mode_log_with_custom_op_notices_has_no_findings():
    assert diagnose((FIXTURES / "healthy_graph_mode.log").read_text()) == []


@pytest.mark.parametrize(
    ("fixture", "code", "line_no", "quoted"),
    [
        ("hccl.log", "hccl", 3, "specific port[16666] fail"),
        ("cann_mismatch.log", "cann_mismatch", 3, "opp version 8.1.RC1 is not compatible"),
        ("soc_mismatch.log", "soc_mismatch", 3, "the socversion Ascend910B2 of bin package does not match"),
        ("device_unavailable.log", "device_unavailable", 2, "error code is 207004"),
        (
            "env_not_sourced.log",
            "env_not_sourced",
            6,
            "ImportError: libhccl.so: cannot open shared object file",
        ),
        ("kv_cache_no_memory.log", "kv_cache_no_memory", 2, "Available memory: -1879048192"),
        ("op_unsupported.log", "op_unsupported", 2, "call aclnnSwiGlu failed"),
        ("graph_capture.log", "graph_capture", 3, "AclmdlRICaptureBegin"),
        ("hccl_init_failed.log", "hccl_init_failed", 2, "error code is 1"),
        ("mla_tp_unsupported.log", "mla_tp_unsupported", 3, "enabling both MLA and Graph mode"),
        ("device_lost.log", "device_lost", 2, "error code:507010"),
        ("mla_head_dim.log", "mla_head_dim", 6, "Head dimension 320 is not supported by MLA."),
        ("atc_input_shape.log", "atc_input_shape", 4, "Opname [input] specified in [--input_shape]"),
        ("atc_soc_version.log", "atc_soc_version", 4, "Value [Ascend910B3] for parameter [--soc_version]"),
        ("atc_model_unreadable.log", "atc_model_unreadable", 4, "for parameter [--model] is invalid"),
        ("stack_mismatch.log", "stack_mismatch", 7, "libtorch_npu.so: undefined symbol: _ZN3atb"),
        ("soc_init_failed.log", "soc_init_failed", 3, "AclSetCompileopt(aclCompileOpt::ACL_PRECISION_MODE"),
        ("visible_device_invalid.log", "visible_device_invalid", 2, "Set visible device failed, invalid"),
        ("graph_stream_exhausted.log", "graph_stream_exhausted", 2, "error code is 207008"),
        ("hccl_socket_timeout.log", "hccl_socket_timeout", 2, "Get_Socket_Timeout(EI0006)"),
        ("hccl_buffsize_small.log", "hccl_buffsize_small", 2, "HCCL_BUFFSIZE is too SMALL"),
        ("peer_rank_died.log", "peer_rank_died", 2, "EI0002"),
        ("quantizer_missing.log", "quantizer_missing", 3, "There is no available ascend quantizer."),
        ("vllm_version_invalid.log", "vllm_version_invalid", 5, "Invalid version: 'dev'"),
        ("custom_kernels_missing.log", "custom_kernels_missing", 1, "libvllm_ascend_kernels.so"),
    ],
)
def test_it_names_each_known_failure_at_its_first_matching_line(fixture, code, line_no, quoted):
    findings = diagnose((FIXTURES / fixture).read_text())
    assert findings, f"{fixture} gave no findings"
    assert findings[0]["code"] == code
    assert findings[0]["line_no"] == line_no
    assert quoted in findings[0]["line"]


def test_every_signature_has_a_fixture_that_names_it():
    named = {diagnose((FIXTURES / f"{s.code}.log").read_text())[0]["code"] for s in SIGNATURES}
    assert named == {s.code for s in SIGNATURES}


def test_it_reports_each_code_once_in_order_of_first_appearance():
    log = "\n".join(
        [
            "INFO starting",
            "EI0006: Getting socket times out.",
            "NPU out of memory. tried to allocate 2.00 GiB",
            "EI0009: Transport init error.",
            "alloc device memory failed, runtime result = 207001",
        ]
    )
    findings = diagnose(log)
    # EI0009 (hccl) after EI0006 (its specific hccl_socket_timeout) repeats the same failure.
    assert [(f["code"], f["line_no"]) for f in findings] == [("hccl_socket_timeout", 2), ("npu_oom", 3)]
    assert findings[0]["general"] == "hccl"
    assert findings[1]["general"] == "npu_oom"


def test_numeric_codes_match_only_as_whole_tokens():
    assert diagnose("request 12070012 done, budget 5207001 tokens, id 2070019") == []
    assert codes(diagnose("runtime result = 207001[FUNC:ReportCallError]")) == ["npu_oom"]
    assert codes(diagnose("Memory_Allocation_Failure(EL0004): Failed to allocate memory")) == ["npu_oom"]


def test_generic_err00100_names_an_operator_failure_only_when_nothing_else_matched():
    alone = "[ERROR] 2025-01-16-11:51:23 (PID:416, Device:1, RankID:-1) ERR00100 PTA call acl api failed."
    assert codes(diagnose(alone)) == ["op_unsupported"]
    with_capture = (FIXTURES / "graph_capture.log").read_text()
    assert "ERR00100" in with_capture
    assert codes(diagnose(with_capture)) == ["graph_capture"]


def test_diagnose_lines_accepts_an_open_file_with_newlines():
    findings = diagnose_lines(io.StringIO("ok\nValueError: No available memory for the cache blocks.\n"))
    assert findings[0]["line"] == "ValueError: No available memory for the cache blocks."
    assert findings[0]["line_no"] == 2


def test_a_very_long_line_is_quoted_shortened():
    findings = diagnose("NPU out of memory " + "x" * 5000)
    assert len(findings[0]["line"]) == MAX_QUOTED_CHARS + 1


def test_the_cli_prints_the_findings_as_json(tmp_path, capsys):
    log = tmp_path / "engine.log"
    log.write_text((FIXTURES / "soc_mismatch.log").read_text())
    assert main([str(log)]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert codes(printed) == ["soc_mismatch"]
    assert set(printed[0]) == {"code", "general", "title", "hint", "line", "line_no"}


def test_the_cli_reads_standard_input(monkeypatch, capsys):
    monkeypatch.setattr(
        "sys.stdin", io.StringIO("RuntimeError: ACL stream synchronize failed, error code:507010\n")
    )
    assert main(["-"]) == 0
    assert codes(json.loads(capsys.readouterr().out)) == ["device_lost"]


def test_the_cli_exits_2_on_an_unreadable_file(tmp_path, capsys):
    assert main([str(tmp_path / "missing.log")]) == 2
    assert "cannot read" in capsys.readouterr().err
