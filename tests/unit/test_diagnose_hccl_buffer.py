"""A too-small HCCL buffer, as CANN's MoE operators report it, is named as such (not as the dispatch operator
that failed with it), and the hint says which variable to raise and to what: the size the line states it
needs, in MB. Message wording is as CANN's ops-transformer tiling prints it; ids and times are made up."""

# ruff: noqa: E501  (log lines are quoted whole)

from workers.ascend.diagnose import diagnose

OPERATOR_FAILED = (
    "(EngineCore_DP0 pid=17833) RuntimeError: npu_moe_distribute_dispatch_v2:build/CMakeFiles/torch_npu.dir/"
    "compiler_depend.ts:161 NPU function error: call aclnnMoeDistributeDispatchV3 failed, error code is 561002"
)
EZ = "(EngineCore_DP0 pid=17833) EZ9999[PID: 17833] 2025-12-23-07:36:19.237.396 (EZ9999):  "
# CANN 8.3+ names the expert parallel group's window HCCL_BUFFSIZE_EP (the layered, hierarchical variant).
HIERARCHY = (
    "HCCL_BUFFSIZE_EP is too SMALL, maxBs = 1, h = 6144,NEEDED_HCCL_BUFFSIZE_HIERARCHY((moeExpertNum * maxBs * "
    "(h * MAX_OUT_DTYPE_SIZE + (3 * (k + 7) / 8 * 8) *sizeof(uint32_t) + 64) + 404 * 1024 * 1024)) = 408MB, "
    "HCCL_BUFFSIZE=256MB.[FUNC:CheckWinSize][FILE:moe_distribute_dispatch_v2_tiling.cpp][LINE:512]"
)
DISPATCH_A3 = (
    "HCCL_BUFFSIZE is too SMALL, maxBs = 64, h = 2048, epWorldSize = 4, localMoeExpertNum = 128, sharedExpertNum = 0, "
    "tokenNeedSizeDispatch = 4608, tokenNeedSizeCombine = 4096, k = 10, NEEDED_HCCL_BUFFSIZE(((maxBs * "
    "tokenNeedSizeDispatch * ep_worldsize * localMoeExpertNum) + (maxBs * tokenNeedSizeCombine * (k + "
    "sharedExpertNum))) * 2) = 294MB, HCCL_BUFFSIZE=200MB.[FUNC:MoeDistributeDispatchA3TilingFuncImpl]"
)


def test_the_ep_buffer_of_newer_cann_is_a_too_small_buffer_not_an_unsupported_operator():
    findings = diagnose("\n".join([OPERATOR_FAILED, EZ + HIERARCHY]))

    assert [(f["code"], f["line_no"]) for f in findings] == [("hccl_buffsize_small", 2)]


def test_the_hint_says_to_set_hccl_buffsize_to_the_size_the_line_needs():
    (finding,) = diagnose("\n".join([OPERATOR_FAILED, EZ + DISPATCH_A3]))

    assert finding["figures"] == {"needed_mb": 294, "had_mb": 200}
    assert "HCCL_BUFFSIZE=294 " in finding["hint"]
    assert "(200 MB)" in finding["hint"]


def test_a_stated_size_in_a_fraction_of_a_mb_is_rounded_up():
    line = "[MoeDistributeCombineV2] HCCL_BUFFSIZE is too SMALL, actualSize=512.3MB, HCCL_BUFFSIZE=512MB."

    (finding,) = diagnose(line)

    assert finding["figures"] == {"needed_mb": 513, "had_mb": 512}


def test_a_too_small_buffer_that_states_no_sizes_keeps_the_general_hint():
    (finding,) = diagnose(EZ + "HCCL BUFFSIZE is too small for the dispatch window.")

    assert "figures" not in finding
    assert "NEEDED_HCCL_BUFFSIZE" in finding["hint"]


def test_a_line_that_states_the_sizes_is_enough_when_the_tool_wrapped_the_words_before_them():
    # Some collectors wrap the long EZ9999 message; the half with the figures still says what to do.
    wrapped = "        NEEDED_HCCL_BUFFSIZE(((maxBs * tokenNeedSizeDispatch * ep_worldsize)) * 2) = 1083MB, HCCL_BUFFSIZE=200MB."

    findings = diagnose("\n".join([OPERATOR_FAILED, wrapped]))

    assert [(f["code"], f["figures"]) for f in findings] == [
        ("hccl_buffsize_small", {"needed_mb": 1083, "had_mb": 200})
    ]
