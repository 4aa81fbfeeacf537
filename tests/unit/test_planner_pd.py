"""The prefill/decode split (workers.engine.planner.plan_pd) and the throughput estimates it rests on
(workers.engine.planner.plan_throughput): P:D counts with per-role TP / DP / EP and EPLB, the reasons
disaggregation is not worth it, and the roofline checked by hand and against Huawei's published figures."""

from dataclasses import replace

import pytest

from tests.planner_inputs import DEEPSEEK_R1, QWEN25_7B, QWEN25_72B, a2_node
from workers.engine.planner.memory import GIB
from workers.engine.planner.plan import PlanInput, plan
from workers.engine.planner.plan_hardware import HARDWARE
from workers.engine.planner.plan_pd import Workload, split
from workers.engine.planner.plan_throughput import (
    ETA_BANDWIDTH,
    ETA_COMPUTE,
    active_params,
    decode_estimate,
    prefill_tokens_per_s,
)

R1 = {**DEEPSEEK_R1, "mtp_layers": 1}
A3, A2, DUO = HARDWARE["a3"], HARDWARE["a2"], HARDWARE["300i-duo"]
LONG = Workload(prompt_tokens=4096, output_tokens=1024)
# Huawei, "Serving Large Language Models on Huawei CloudMatrix384" (arXiv 2506.12708): DeepSeek-R1 in INT8,
# per 910C NPU, which is two of the dies the planner counts as NPUs.
HUAWEI_PREFILL_PER_NPU, HUAWEI_DECODE_PER_NPU = 6688, 1943


def a3_nodes(nodes, **overrides):
    return PlanInput(
        npu_memory_bytes=A3.npu_memory_bytes, npus_per_node=16, nodes=nodes, chip="a3", **overrides
    )


def codes(result):
    return [item.code for item in result.reasons]


def test_active_parameters_count_the_experts_a_token_passes_through():
    # DeepSeek-V3 / R1: "671B total, 37B activated" less the 0.9B input embedding.
    assert active_params(R1) == pytest.approx(37e9 - 129280 * 7168, rel=0.02)
    assert active_params(QWEN25_7B) == QWEN25_7B["params"] - 152064 * 3584


def test_the_prefill_estimate_is_the_roofline_written_in_the_module():
    prompt = 2048
    linear = 2 * active_params(QWEN25_7B)
    attention = 2 * 28 * 28 * (128 + 128) * (prompt // 2)  # layers x heads x (K + V dims) x half the prompt
    by_hand = 1 / ((linear + attention) / (A2.flops_16bit * ETA_COMPUTE))
    assert prefill_tokens_per_s(QWEN25_7B, A2, "BF16", prompt) == pytest.approx(by_hand)
    # W8A8 runs its matmuls at the INT8 peak: faster, but not twice (attention stays 16-bit).
    w8a8 = prefill_tokens_per_s(QWEN25_7B, A2, "W8A8", prompt)
    assert by_hand < w8a8 < 2 * by_hand


def test_one_decode_step_reads_the_weights_and_the_batchs_kv_cache():
    result = plan(QWEN25_7B, a2_node(npus_per_node=1, max_model_len=4096))
    estimate = decode_estimate(QWEN25_7B, A2, result, 2048, 512, 0.05)
    read = result.weights_bytes_per_npu + estimate.batch * (2048 + 256) * result.kv_bytes_per_token
    assert estimate.step_s > read / (A2.memory_bandwidth * ETA_BANDWIDTH)
    assert estimate.step_s <= 0.05
    assert estimate.tokens_per_s_per_npu == pytest.approx(estimate.batch / estimate.step_s)


def test_the_estimates_are_within_a_factor_of_two_of_huaweis_cloudmatrix_figures():
    # A sanity anchor, not a calibration: the same model and weights, on a layout like theirs (EP over 320
    # dies, TP 1), compared per 910C NPU (two dies).
    per_die = prefill_tokens_per_s(R1, A3, "W8A8", 4096)
    assert 0.5 < 2 * per_die / HUAWEI_PREFILL_PER_NPU < 2
    ep320 = plan(
        R1,
        a3_nodes(
            20, quantization="ascend", max_model_len=8192, tensor_parallel_size=1, data_parallel_size=320
        ),
    )
    assert ep320.fits
    decode = decode_estimate(R1, A3, ep320, 4096, 1024, 0.05)
    assert 0.5 < 2 * decode.tokens_per_s_per_npu / HUAWEI_DECODE_PER_NPU < 2


def test_deepseek_on_four_a3_nodes_splits_with_a_wider_decode_and_eplb_per_role():
    result = split(R1, a3_nodes(4, quantization="ascend"), LONG, "0.23.0")
    assert result.worth_it
    prefill, decode = result.prefill, result.decode
    assert (prefill.plan.tensor_parallel_size, prefill.plan.data_parallel_size) == (4, 4)
    assert prefill.plan.enable_expert_parallel
    assert decode.plan.enable_expert_parallel
    assert decode.npus > prefill.npus  # experts spread thinner: fewer weights read per decode step
    assert prefill.replicas * prefill.npus + decode.replicas * decode.npus <= 64
    assert prefill.eplb
    assert decode.eplb
    assert decode.plan.redundant_experts == decode.npus
    assert result.estimates["requests_per_s"] > 0
    assert codes(result)[:2] == ["pd_split", "pd_estimate"]
    assert {"pd_sanity_anchor", "pd_eplb_prefill", "pd_eplb_decode"} <= set(codes(result))
    shown = result.as_dict()
    assert shown["decode"]["expert_parallel_size"] == decode.npus
    assert shown["prefill"]["max_model_len"] == 5120


def test_eplb_stays_off_where_the_version_does_not_have_it():
    result = split(R1, a3_nodes(4, quantization="ascend"), LONG, "0.13.0")
    assert not result.prefill.eplb
    assert not result.decode.eplb
    assert "pd_eplb_decode" not in codes(result)


def test_qwen_72b_with_long_prompts_on_two_a2_nodes_splits_by_throughput():
    result = split(QWEN25_72B, a2_node(nodes=2), Workload(8192, 512))
    assert result.worth_it
    assert result.prefill.plan.tensor_parallel_size == 4
    used = result.prefill.replicas * result.prefill.npus + result.decode.replicas * result.decode.npus
    assert used <= 16
    assert result.estimates["prefill_share"] > 0.3  # long prompts: prefill is a large part of the work


def test_not_worth_it_on_one_node():
    result = split(QWEN25_72B, a2_node(), Workload(8192, 512))
    assert not result.worth_it
    assert "pd_not_worth_one_node" in codes(result)
    assert result.prefill is not None  # the split is still shown, with the reason against it


def test_not_worth_it_for_a_model_that_fits_one_npu_or_for_short_prompts():
    small = split(QWEN25_7B, a2_node(nodes=2), Workload(2048, 512))
    assert not small.worth_it
    assert "pd_not_worth_small_model" in codes(small)
    short = split(QWEN25_72B, a2_node(nodes=2), Workload(256, 512))
    assert not short.worth_it
    reason = next(r for r in short.reasons if r.code == "pd_not_worth_short_prompts")
    assert reason.params["prompt"] == 256  # under 1024 tokens
    # 1024 tokens over a 16-NPU DeepSeek instance prefill in less than one 50 ms decode step.
    quick = split(R1, a3_nodes(4, quantization="ascend"), Workload(1024, 1024))
    assert not quick.worth_it
    reason = next(r for r in quick.reasons if r.code == "pd_not_worth_short_prompts")
    assert reason.params["prefill_ms"] < reason.params["tpot"] == 50


def test_no_room_for_two_instances_says_so():
    result = split(R1, a2_node(nodes=2, quantization="ascend"), LONG)
    assert not result.worth_it
    assert result.prefill is None
    assert result.decode is None
    no_room = next(r for r in result.reasons if r.code == "pd_no_room")
    assert no_room.params == {"needed": 32, "npus": 16}


def test_a_300i_duo_chip_cannot_decode_a_7b_model_within_50_ms():
    request = PlanInput(npu_memory_bytes=DUO.npu_memory_bytes, npus_per_node=8, nodes=2, chip="310p")
    result = split(QWEN25_7B, request, Workload(4096, 256))
    missed = next(r for r in result.reasons if r.code == "pd_tpot_missed")
    assert missed.level == "warning"
    assert missed.params["step"] > 50
    # 14.2 GiB of FP16 weights at 204 GB/s x 0.7 take about 107 ms to read once.
    assert missed.params["step"] == pytest.approx(15.2e9 / (0.204e12 * ETA_BANDWIDTH) * 1000, rel=0.1)
    assert result.estimates["decode_within_tpot"] is False


def test_a_model_that_fits_nowhere_on_offer_answers_the_planners_errors():
    result = split(R1, replace(a2_node(), npu_memory_bytes=32 * GIB), LONG)
    assert not result.worth_it
    assert result.reasons
    assert all(r.level == "error" for r in result.reasons)


def test_a_chip_without_figures_gets_no_split_and_says_why():
    result = split(QWEN25_72B, a2_node(chip="950", nodes=2), Workload(8192, 512))
    assert not result.worth_it
    assert codes(result) == ["pd_no_chip_figures"]
    assert result.reasons[0].params == {"chip": "950"}


def test_a_decode_layout_with_a_tp_above_the_prefills_is_never_proposed(monkeypatch):
    """Mooncake refuses it in every vllm-ascend release (the launch matrix's `split` rule)."""
    from workers.engine.planner import plan_pd

    real_spread = plan_pd._spread
    wider_tp = []

    def spread_with_a_wider_tp(facts, request, nodes):
        found = real_spread(facts, request, nodes)
        if found is None:
            return None
        bent = replace(found, tensor_parallel_size=found.tensor_parallel_size * 2,
                       data_parallel_size=max(found.data_parallel_size // 2, 1))  # fmt: skip
        wider_tp.append(bent)
        return bent

    monkeypatch.setattr(plan_pd, "_spread", spread_with_a_wider_tp)
    result = split(R1, a3_nodes(4, quantization="ascend"), LONG, "0.23.0")
    assert wider_tp  # the wider layouts were offered...
    assert result.decode.plan.tensor_parallel_size <= result.prefill.plan.tensor_parallel_size  # ...and left


@pytest.mark.parametrize(
    ("facts", "request_"),
    [(R1, a3_nodes(4, quantization="ascend")), (R1, a3_nodes(2, quantization="ascend")),
     (QWEN25_72B, a2_node(nodes=2))],
)  # fmt: skip
def test_every_proposed_split_keeps_the_decode_tp_at_or_below_the_prefill_tp(facts, request_):
    result = split(facts, request_, LONG, "0.23.0")
    if result.worth_it:
        assert result.decode.plan.tensor_parallel_size <= result.prefill.plan.tensor_parallel_size
