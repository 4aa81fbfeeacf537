"""The failures real Ascend sites report (vllm-ascend, torch_npu, CANN and HCCL issues): specific codes with
their general family, the first rank that failed in a multi-rank timeout, a warning that matters only when
a later step dies, and the workers' own memory report. Message wording is as the tools print it; process
ids, times and paths are made up."""

# ruff: noqa: E501  (log lines are quoted whole)

from pathlib import Path

import pytest

from workers.ascend.diagnose import diagnose
from workers.ascend.ranks import first_failing_rank, line_time, rank_tag
from workers.ascend.signatures import SIGNATURES

FIXTURES = Path(__file__).resolve().parent / "data" / "diagnose"


def codes(findings):
    return [(f["code"], f["general"]) for f in findings]


@pytest.mark.parametrize(
    ("code", "general"),
    [
        ("stack_mismatch", "cann_mismatch"),
        ("soc_init_failed", "cann_mismatch"),
        ("visible_device_invalid", "device_unavailable"),
        ("graph_stream_exhausted", "graph_capture"),
        ("mla_tp_unsupported", "graph_capture"),
        ("hccl_socket_timeout", "hccl"),
        ("hccl_init_failed", "hccl"),
        ("hccl_buffsize_small", "hccl"),
        ("peer_rank_died", "hccl"),
        ("custom_kernels_missing", "graph_capture"),
        ("quantizer_missing", "quantizer_missing"),
        ("vllm_version_invalid", "vllm_version_invalid"),
    ],
)
def test_each_field_failure_names_its_family(code, general):
    findings = diagnose((FIXTURES / f"{code}.log").read_text())
    assert codes(findings)[0] == (code, general)


def test_every_general_family_exists_and_every_hint_names_a_fix():
    known = {s.code for s in SIGNATURES}
    for signature in SIGNATURES:
        assert not signature.general or signature.general in known, signature.code
        assert len(signature.hint) > 80, signature.code


def test_a_general_finding_before_its_specific_one_is_an_earlier_cause_and_stays():
    # The port was taken (hccl) first, then the ranks timed out connecting (hccl_socket_timeout, the EI0006
    # line; the failed set-up on line 5 is that timeout seen from torch_npu and is not named apart).
    findings = diagnose((FIXTURES / "hccl.log").read_text())
    assert [(f["code"], f["line_no"]) for f in findings] == [("hccl", 3), ("hccl_socket_timeout", 7)]


def test_a_general_finding_after_its_specific_one_repeats_it_and_is_left_out():
    text = (FIXTURES / "graph_stream_exhausted.log").read_text()
    assert "begin capture stream failed" in text  # what graph_capture alone would name
    assert [f["code"] for f in diagnose(text)] == ["graph_stream_exhausted"]


@pytest.mark.parametrize(
    ("line", "code"),
    [
        ("OSError: /home/u/Ascend/nnal/atb/latest/atb/cxx_abi_1/lib/libtbe_adapter.so: undefined symbol: "
         "_ZN3Mki2DlC1ERKNSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEEb", "stack_mismatch"),
        ("RuntimeError: Initialize:torch_npu/csrc/core/npu/sys_ctrl/npu_sys_ctrl.cpp:146 NPU function error: "
         "c10_npu::SetDevice(device_id), error code is 507033", "visible_device_invalid"),
        ("EE1001: [PID: 112081] 2025-07-17-08:06:53.296.370 The argument is invalid.Reason: set "
         "ASCEND_RT_VISIBLE_DEVICES:0,2,4,6,1,3,5,7 error, it must be configured in ascending order",
         "visible_device_invalid"),
        ("RuntimeError: create_config:build/CMakeFiles/torch_npu.dir/compiler_depend.ts:102 HCCL function "
         "error: hcclCommInitRootInfoConfig(numRanks, &rootInfo, rank, config, &(comm->hcclComm_)), error "
         "code is 9", "hccl_socket_timeout"),
        ("[PID: 108272] 2026-05-21-21:41:11.284.296 Communication_Error_Get_Socket(EI0006): Getting socket "
         "times out.", "hccl_socket_timeout"),
        ("ERROR 06-26 08:18:55 [core.py:515] AssertionError: The allowed number of queries per kv when "
         "enabling both MLA and Graph mode only support {32, 64, 128}, Thus this is not supported for "
         "DeepSeek-V2-Lite, as it only has 16 attention heads.", "mla_tp_unsupported"),
        ("(Worker_TP3 pid=78100) ERROR 04-20 21:27:00 [multiproc_executor.py:932] [Error]: Stream resources "
         "are insufficient.", "graph_stream_exhausted"),
        ("(RayWorkerWrapper pid=91798) [rank1]:[E1129 10:54:13.679153542 compiler_depend.ts:444] "
         "operator():build/CMakeFiles/torch_npu.dir/compiler_depend.ts:1153 NPU function error: call failed, "
         "error code is 507014", "peer_rank_died"),
        ("ImportError: libatb.so: cannot open shared object file: No such file or directory", "env_not_sourced"),
        ("RuntimeError: Failed to infer device type, please set the environment variable "
         "`VLLM_LOGGING_LEVEL=DEBUG` to turn on verbose logging to help debug the issue.", "env_not_sourced"),
        ("AttributeError: '_OpNamespace' '_C_ascend' object has no attribute 'weak_ref_tensor'",
         "custom_kernels_missing"),
        ("ValueError: Invalid vllm version 0.1.dev1+gabcdef found. A dev version of vllm is installed "
         "probably.", "vllm_version_invalid"),
    ],
)  # fmt: skip
def test_real_lines_name_their_failure(line, code):
    assert [f["code"] for f in diagnose(line)] == [code]


def test_the_first_rank_that_failed_is_named_by_time_not_by_line_order():
    (finding,) = diagnose((FIXTURES / "peer_rank_died.log").read_text())
    first = finding["first_rank"]
    assert first["rank"] == 2
    assert first["where"] == "[rank2]"
    assert first["line_no"] == 5  # line 4 is rank 2's warning, line 2 the first timeout printed
    assert "aicore execution times out" in first["line"]


def test_hccls_own_verdict_names_the_stuck_device():
    log = (
        "[rank3]:[E0326 13:07:07.100 compiler_depend.ts:444] EI0002: The wait execution of the Notify "
        "register times out.\n"
        "there are(is) 1 abnormal device(s):\n"
        "        Cluster Exception Location[IP/ID]:[172.16.38.219/6], Arrival Time:[Wed Mar 26 13:07:07 "
        "2025], ExceptionType:[Stuck Occurred]\n"
    )
    first = diagnose(log)[0]["first_rank"]
    assert first == {"rank": None, "where": "172.16.38.219/6", "line": first["line"], "line_no": 3}


def test_vllm_worker_prefixes_name_the_rank_or_the_worker():
    assert rank_tag("(Worker_TP3 pid=66120) ERROR 10-14 13:30:07 [x.py:1] boom") == (3, "Worker_TP3")
    assert rank_tag("(Worker_DP1_TP3_EP11 pid=187) ERROR ...") == (None, "Worker_DP1_TP3_EP11")
    assert rank_tag("[ERROR] 2025-06-25-10:45:23 (PID:13075, Device:0, RankID:8) ERR00100") == (8, "RankID:8")
    assert rank_tag("[ERROR] 2025-06-25-10:45:23 (PID:13075, Device:0, RankID:-1) ERR00100") is None
    assert rank_tag("(VllmWorker rank=1 pid=48213) ERROR 06-02 10:16:42 ...") == (1, "VllmWorker rank=1")


def test_times_in_each_format_compare_without_the_year():
    cann = line_time("EI0002: [PID: 1] 2025-06-25-10:45:23.586.187 x")
    vllm = line_time("(Worker_TP1 pid=2) ERROR 06-25 10:45:22 [core.py:1] x")
    glog = line_time("[rank0]:[E0625 10:45:24.100 compiler_depend.ts:1] x")
    assert vllm < cann < glog
    assert line_time("no time here") is None


def test_without_times_the_first_failure_line_wins_and_info_lines_do_not_count():
    lines = [
        "(Worker_TP0 pid=1) INFO starting, no error yet",
        "(Worker_TP1 pid=2) ERROR RuntimeError: device lost",
        "(Worker_TP0 pid=1) ERROR EI0002 notify wait timeout",
    ]
    assert first_failing_rank(lines)["rank"] == 1
    assert first_failing_rank(["EI0002 notify wait timeout"]) is None


def test_the_kernels_warning_alone_is_harmless():
    warning = (FIXTURES / "custom_kernels_missing.log").read_text().splitlines()[0]
    eager = [warning, "INFO 09-18 10:33:40 [api_server.py:1] Application startup complete."]
    assert diagnose("\n".join(eager)) == []
    captured = [
        warning,
        "INFO 09-18 10:34:20 [model_runner_v1.py:3502] Starting to capture ACL graphs for cases: [1, 2]",
        "INFO 09-18 10:34:40 [model_runner_v1.py:2533] Graph capturing finished in 20 secs, took 0.41 GiB",
        "ERROR 09-18 11:02:00 [serving_chat.py:1] request 7 failed: prompt too long",
    ]
    assert diagnose("\n".join(captured)) == []


def test_a_missing_kernel_module_then_a_crash_while_capturing_is_diagnosed():
    log = [
        "ERROR 04-28 16:10:09 camem.py:69] Failed to import vllm_ascend_C:No module named 'vllm_ascend.vllm_ascend_C'",
        "INFO 04-28 16:11:00 [model_runner_v1.py:3502] Starting to capture ACL graphs for cases: [1, 2, 4]",
        "Capturing ACL graphs (decode, FULL):   0%|          | 0/3 [00:00<?, ?it/s]",
        "RuntimeError: Worker failed with error 'NPUModelRunner init failed'",
    ]  # fmt: skip
    (finding,) = diagnose("\n".join(log))
    assert (finding["code"], finding["line_no"]) == ("custom_kernels_missing", 1)
    assert "--enforce-eager" in finding["hint"]


def test_the_workers_memory_report_is_enough_when_the_log_ends_before_vllms_error():
    cut = (FIXTURES / "kv_cache_no_memory.log").read_text().splitlines()[:2]
    assert [f["code"] for f in diagnose("\n".join(cut))] == ["kv_cache_no_memory"]
    vllm = (
        "(EngineCore_DP0 pid=9) INFO 08-01 10:00:00 [gpu_worker.py:276] Available KV cache memory: -2.35 GiB"
    )
    assert [f["code"] for f in diagnose(vllm)] == ["kv_cache_no_memory"]
    healthy = [
        "(EngineCore_0 pid=9) INFO 07-22 11:05:51 [worker_v1.py:186] Available memory: 27648655360, total memory: 65452113920",
        "(EngineCore_DP0 pid=9) INFO 08-01 10:00:00 [gpu_worker.py:276] Available KV cache memory: 0.52 GiB",
        "(EngineCore_DP0 pid=9) INFO 08-01 10:00:00 [gpu_worker.py:276] Available KV cache memory: 10.0 GiB",
    ]  # fmt: skip
    assert diagnose("\n".join(healthy)) == []


INIT_FAILED = (
    "(VllmWorker rank=1 pid=7226) ERROR 09-03 03:02:37 [multiproc_executor.py:522] RuntimeError: create_config:"
    "build/CMakeFiles/torch_npu.dir/compiler_depend.ts:148 HCCL function error: hcclCommInitRootInfoConfig("
    "numRanks, &rootInfo, rank, config, &(comm->hcclComm_)), error code is {code}"
)


@pytest.mark.parametrize("code", [1, 7, 11, 15])
def test_a_communicator_set_up_that_failed_without_a_timeout_is_not_called_one(code):
    log = (
        INIT_FAILED.format(code=code)
        + "\n[ERROR] 2025-09-03-03:02:37 (PID:7226) ERR02200 DIST call hccl api failed."
    )
    (finding,) = diagnose(log)
    assert (finding["code"], finding["general"]) == ("hccl_init_failed", "hccl")
    assert "in time" not in finding["title"]
    assert "timeout" not in finding["title"].lower()


def test_a_communicator_set_up_that_failed_is_named_a_timeout_when_the_log_shows_one():
    log = "\n".join(
        [
            INIT_FAILED.format(code=7),
            "[PID: 7226] 2025-09-03-03:02:37.301.554 Get_Socket_Timeout(EI0006): Getting socket times out.",
        ]
    )
    assert [(f["code"], f["line_no"]) for f in diagnose(log)] == [("hccl_socket_timeout", 2)]


def test_streams_exhausted_during_capture_are_named_so_not_a_generic_capture_failure():
    # The capture call's own error (207005, graph_capture's code) comes before the driver's reason.
    log = "\n".join(
        [
            "(Worker_TP0 pid=1802934) INFO 04-17 09:16:30 [model_runner_v1.py:3502] Starting to capture ACL graphs",
            "RuntimeError: capture_begin:build/CMakeFiles/torch_npu.dir/compiler_depend.ts:214 NPU function error: "
            "c10_npu::acl::AclmdlRICaptureBegin(capture_stream_, capture_mode), error code is 207005",
            "[ERROR] 2026-04-17-09:16:39 (PID:1802934, Device:0, RankID:-1) ERR00100 PTA call acl api failed",
            "EE9999[PID: 1802934] 2026-04-17-09:16:39.992.922 (EE9999):  [SqCqManage]Alloc sq cq fail, "
            "stream_id=1984, retCode=0x7020023.[FUNC:Setup][FILE:stream.cc][LINE:398]",
        ]
    )
    assert [(f["code"], f["line_no"]) for f in diagnose(log)] == [("graph_stream_exhausted", 4)]


def test_a_new_capture_stream_that_could_not_be_made_is_streams_exhausted():
    log = "\n".join(
        [
            "(Worker_TP3 pid=78100) ERROR 04-20 21:27:00 [multiproc_executor.py:932]        New capture stream "
            "failed, stream_id=1987, event_id=[-1->70037].[FUNC:GetCaptureStream][FILE:capture_model_utils.cc]",
            "(Worker_TP3 pid=78100) ERROR 04-20 21:27:00 [multiproc_executor.py:932]        stream wait event "
            "failed, runtime result = 207005[FUNC:ReportCallError][FILE:log_inner.cpp][LINE:148]",
        ]
    )
    assert [f["code"] for f in diagnose(log)] == ["graph_stream_exhausted"]


@pytest.mark.parametrize(
    "reason",
    [
        "HCCL_BUFFSIZE is too SMALL, maxBs = 512, h = 2048, epWorldSize = 2, NEEDED_HCCL_BUFFSIZE = 609MB, "
        "HCCL_BUFFSIZE=200MB.",
        "HCCL BUFFSIZE is too small, please set HCCL_BUFFSIZE to at least 609MB.",
    ],
)
def test_a_too_small_hccl_buffer_is_named_so_not_a_failed_operator(reason):
    # The MoE dispatch operator's failure is printed first; the buffer is why.
    log = "\n".join(
        [
            "(EngineCore_DP0 pid=17833) RuntimeError: npu_moe_distribute_dispatch_v2:build/CMakeFiles/torch_npu.dir/"
            "compiler_depend.ts:161 NPU function error: call aclnnMoeDistributeDispatchV3 failed, error code is 561002",
            "(EngineCore_DP0 pid=17833) [ERROR] 2025-12-23-07:36:19 (PID:17833) ERR00100 PTA call acl api failed.",
            f"(EngineCore_DP0 pid=17833) EZ9999[PID: 17833] 2025-12-23-07:36:19.237.396 (EZ9999):  {reason}",
        ]
    )
    assert [(f["code"], f["general"]) for f in diagnose(log)] == [("hccl_buffsize_small", "hccl")]
