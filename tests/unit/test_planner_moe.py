"""MoE launches in the planner: DP x TP with expert parallel, EPLB's redundant experts, MTP drafts,
HCCL_BUFFSIZE in the memory plan, and the graph mode per version. Facts are the public configs'
(tests/unit/test_planner.py); DeepSeek-R1 ships one MTP layer (num_nextn_predict_layers: 1)."""

from dataclasses import replace

import pytest

from tests.planner_inputs import A2_NPU, DEEPSEEK_R1, DEEPSEEK_V2_LITE, QWEN25_72B, a2_node, codes
from workers.engine.planner import memory
from workers.engine.planner.memory import GIB
from workers.engine.planner.plan import PlanInput, plan
from workers.engine.planner.plan_moe import graph_config, moe_layout, mtp_config, plan_with_eplb

R1 = {**DEEPSEEK_R1, "mtp_layers": 1}
A3 = PlanInput(
    npu_memory_bytes=A2_NPU, npus_per_node=16, chip="a3", quantization="ascend", max_model_len=16384
)
TWO_A2 = a2_node(quantization="ascend", nodes=2, max_model_len=16384)


def laid_out(request, facts=R1):
    tp, dp = moe_layout(facts, request)
    return replace(request, tensor_parallel_size=tp, data_parallel_size=dp)


def test_deepseek_runs_as_dp4_tp4_with_expert_parallel_on_one_a3_node_and_on_two_a2_nodes():
    # The DeepSeek-V3.1 tutorial: "we recommend using dp4tp4 instead of dp2tp8"; 128 heads / 4 = 32 per NPU.
    assert moe_layout(R1, A3) == (4, 4)
    assert moe_layout(R1, TWO_A2) == (4, 4)
    result = plan(R1, laid_out(A3))
    assert result.fits
    assert result.enable_expert_parallel
    assert not result.enforce_eager


def test_the_layout_is_left_to_the_planner_for_dense_models_eager_mode_and_too_few_heads():
    assert moe_layout(QWEN25_72B, a2_node()) is None
    assert moe_layout(R1, replace(A3, enforce_eager=True)) is None
    # V2-Lite has 16 heads: no TP leaves 32, 64 or 128 per NPU, so graph mode cannot run anyway.
    assert moe_layout(DEEPSEEK_V2_LITE, a2_node()) is None


def test_hccl_buffers_count_two_per_communicator_at_the_launchs_buffsize():
    assert memory.hccl_communicators(1, 1, False) == 0
    assert memory.hccl_communicators(8, 1, False) == 1
    assert memory.hccl_communicators(4, 4, True) == 4  # TP, DP, EP and vllm-ascend's MC2 group
    assert memory.hccl_bytes(512, 4) == 4 * 2 * 512 * 1024**2
    default, big = plan(R1, laid_out(A3)), plan(R1, replace(laid_out(A3), hccl_buffsize_mb=512))
    assert default.hccl_bytes_per_npu == memory.hccl_bytes(200, 4)
    assert big.memory.reserve_bytes - default.memory.reserve_bytes == memory.hccl_bytes(312, 4)
    assert big.kv_cache_tokens < default.kv_cache_tokens
    note = next(r for r in big.reasons if r.code == "hccl_buffers")
    assert note.message == (
        "HCCL holds 4 communicator(s) per NPU at 2 x HCCL_BUFFSIZE (512 MB) each: 4.0 GiB per NPU, "
        "counted in the reserve."
    )


def test_a_single_npu_holds_no_hccl_buffers():
    result = plan(QWEN25_72B, PlanInput(npu_memory_bytes=A2_NPU, npus_per_node=8, tensor_parallel_size=4))
    assert result.hccl_bytes_per_npu == memory.hccl_bytes(200, 1)


def test_mtp_drafts_cost_one_more_layer_of_weights_and_kv_cache():
    request = laid_out(A3)
    without, with_mtp = plan(R1, request), plan(R1, replace(request, mtp_tokens=1))
    assert with_mtp.fits
    draft = with_mtp.weights_bytes_per_npu - without.weights_bytes_per_npu
    # One DeepSeek-V3 MoE layer in W8A8, split as the model's own layers are: about 0.8 GiB per NPU.
    assert 0.5 * GIB < draft < 1.2 * GIB
    assert with_mtp.kv_bytes_per_token == memory.kv_bytes_per_token(R1, 4, "bfloat16") * 62 // 61
    assert with_mtp.kv_cache_tokens < without.kv_cache_tokens
    assert "mtp_draft" in codes(with_mtp)
    assert with_mtp.as_dict()["mtp_tokens"] == 1


def test_mtp_on_a_model_without_mtp_layers_does_not_fit():
    result = plan(QWEN25_72B, a2_node(mtp_tokens=1))
    assert not result.fits
    assert "mtp_unsupported" in codes(result)


def test_eplb_adds_one_redundant_expert_per_ep_rank_where_the_version_recommends_it():
    request = laid_out(A3)
    result, eplb, reasons = plan_with_eplb(R1, request, "0.23.0")
    assert eplb.env == {"DYNAMIC_EPLB": "true"}
    assert eplb.additional_config == {
        "eplb_config": {"dynamic_eplb": True, "eplb_policy_type": 2, "num_redundant_experts": 16}
    }
    bare = plan(R1, request)
    extra = result.weights_bytes_per_npu - bare.weights_bytes_per_npu
    per_expert = bare.weights.expert_bytes / 256  # one routed expert across all its layers
    assert extra == pytest.approx(per_expert, rel=0.01)  # 16 extra experts over 16 NPUs: one each
    assert [r.code for r in reasons] == ["eplb_on"]
    assert result.redundant_experts == 16


def test_eplb_stays_off_on_old_releases_w4a8_weights_or_without_room():
    request = laid_out(A3)
    assert plan_with_eplb(R1, request, "0.13.0")[1] is None
    w4a8 = {**R1, "quantization": "W4A8_DYNAMIC", "weights_bytes": 380 * GIB}
    _plan, eplb, reasons = plan_with_eplb(w4a8, laid_out(A3, w4a8), "0.23.0")
    assert eplb is None
    assert [r.code for r in reasons] == ["eplb_unsupported_weights"]
    # 131072-token sequences fit 148,736 KV tokens per engine, but not once the copies take 2.4 GiB a NPU.
    tight = replace(request, max_model_len=131072)
    assert plan(R1, tight).fits
    result, eplb, reasons = plan_with_eplb(R1, tight, "0.23.0")
    assert result.fits
    assert eplb is None
    assert [r.code for r in reasons] == ["eplb_no_room"]


def test_deepseek_graph_mode_and_mtp_method_follow_the_version():
    assert graph_config("0.23.0", "deepseek", eager=False)[0] == {"cudagraph_mode": "FULL_DECODE_ONLY"}
    assert graph_config("0.11.0", "deepseek", eager=False) == ({}, [])
    assert graph_config("0.23.0", "deepseek", eager=True) == ({}, [])
    assert graph_config("0.23.0", None, eager=False) == ({}, [])
    assert mtp_config("0.23.0", 2) == {"method": "mtp", "num_speculative_tokens": 2}
    assert mtp_config("0.9.1", 1)["method"] == "deepseek_mtp"
    assert mtp_config("0.23.0", 0) == {}
