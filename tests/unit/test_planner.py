"""The planner on published model configs (tests/planner_inputs.py), and every Ascend rule it enforces."""

import json

import pytest

from tests.planner_inputs import (
    A2_NPU,
    DEEPSEEK_R1,
    DEEPSEEK_V2,
    DEEPSEEK_V2_LITE,
    P310_NPU,
    QWEN25_7B,
    QWEN25_72B,
    a2_node,
    codes,
)
from workers.engine.planner import memory
from workers.engine.planner.memory import GIB
from workers.engine.planner.plan import PlanInput, PlanInputError, plan
from workers.engine.planner.plan_cli import main as plan_main
from workers.engine.planner.plan_cli import with_config_extras
from workers.engine.planner.plan_reasons import TEMPLATES


def test_it_predicts_the_kv_cache_vllm_ascend_logged_for_qwen25_7b():
    # A real vllm-ascend start-up (shared sample vllm-serve-startup_ascend_v1_01): Qwen2.5-7B-Instruct,
    # TP 1, 0.90 of one 64 GiB NPU, max-model-len 26240 -> "KV cache size: 744,048 tokens", "28.36x".
    result = plan(QWEN25_7B, a2_node(npus_per_node=1, max_model_len=26240))
    assert result.fits
    assert result.tensor_parallel_size == 1
    assert abs(result.kv_cache_tokens - 744_048) / 744_048 < 0.01
    assert result.max_concurrent_seqs == 28
    assert result.kv_cache_tokens % 128 == 0


def test_it_counts_gqa_kv_cache_bytes_per_token():
    # 28 layers x 4 KV heads x 128 dims x (K and V) x 2 bytes
    assert memory.kv_bytes_per_token(QWEN25_7B, 1, "bfloat16") == 28 * 4 * 128 * 2 * 2
    assert memory.kv_bytes_per_token(QWEN25_7B, 4, "bfloat16") == 28 * 1 * 128 * 2 * 2


def test_it_replicates_kv_heads_when_tp_exceeds_them():
    # Qwen2.5-72B has 8 KV heads: at TP 16 each NPU still stores one whole head.
    assert memory.kv_heads_per_npu(QWEN25_72B, 16) == 1
    assert memory.kv_bytes_per_token(QWEN25_72B, 16, "bfloat16") == 80 * 1 * 128 * 2 * 2
    result = plan(QWEN25_72B, PlanInput(npu_memory_bytes=A2_NPU, npus_per_node=16, tensor_parallel_size=16))
    assert result.fits
    assert result.kv_bytes_per_token == memory.kv_bytes_per_token(QWEN25_72B, 8, "bfloat16")


def test_it_counts_mla_kv_cache_as_one_latent_per_layer_on_every_npu():
    expected = (512 + 64) * 60 * 2
    assert memory.kv_bytes_per_token(DEEPSEEK_V2, 1, "bfloat16") == expected
    assert memory.kv_bytes_per_token(DEEPSEEK_V2, 8, "bfloat16") == expected


def test_it_picks_the_smallest_tp_that_holds_qwen25_72b_and_a_full_sequence():
    result = plan(QWEN25_72B, a2_node())
    assert result.fits
    assert result.tensor_parallel_size == 4  # 135 GiB of BF16 does not fit 2 x 57.6 GiB
    assert result.weights_bytes_per_npu == -(-QWEN25_72B["weights_bytes"] // 4)
    assert result.kv_cache_tokens >= 32768
    assert "npus_left_idle" in codes(result)


def test_it_says_no_to_deepseek_v2_in_bf16_on_one_node_and_offers_w8a8():
    result = plan(DEEPSEEK_V2, a2_node())
    assert not result.fits
    needs = next(r for r in result.reasons if r.code == "needs_more_nodes")
    assert needs.params["nodes"] == 2
    assert "439.1 GiB of BF16 weights do not fit 1 node(s) of 8 x 64.0 GiB at 0.90" in needs.message
    w8a8 = next(r for r in result.reasons if r.code == "fits_as_w8a8")
    assert w8a8.params["tp"] == 8
    assert w8a8.params["nodes"] == 1
    assert w8a8.params["tokens"] > 163840
    assert float(w8a8.params["weights"]) == pytest.approx(471.5e9 / 2 / GIB, rel=0.03)


def test_it_fits_deepseek_v2_as_w8a8_with_tp8_in_eager_mode():
    result = plan(DEEPSEEK_V2, a2_node(quantization="ascend"))
    assert result.fits
    assert result.tensor_parallel_size == 8
    assert result.weights.label == "W8A8"
    assert result.enforce_eager  # 128 heads / TP 8 = 16 per NPU
    assert "mla_graph_mode_heads" in codes(result)


def test_it_keeps_embeddings_16bit_when_estimating_w8a8():
    weights = memory.serving_weights(DEEPSEEK_V2, "ascend", "bfloat16")
    embeddings = 102400 * 5120 * 2
    linear = DEEPSEEK_V2["params"] - embeddings - (2 * 60 + 1) * 5120
    assert weights.estimated
    assert linear + 2 * embeddings < weights.total_bytes < linear * 1.01 + 2 * embeddings + 2 * 121 * 5120


def test_it_spreads_deepseek_r1_w8a8_over_two_a2_nodes_with_expert_parallel():
    # vllm-ascend's DeepSeek-R1-W8A8 tutorial: one A3 node (16 x 64G) or two Atlas 800 A2 (8 x 64G) nodes.
    one_node = plan(DEEPSEEK_R1, a2_node(quantization="ascend"))
    assert not one_node.fits
    assert "needs_more_nodes" in codes(one_node)
    two_nodes = plan(DEEPSEEK_R1, a2_node(quantization="ascend", nodes=2, max_model_len=32768))
    assert two_nodes.fits
    assert two_nodes.nodes == 2
    assert two_nodes.enable_expert_parallel
    assert two_nodes.tensor_parallel_size * two_nodes.data_parallel_size == 16
    assert not two_nodes.enforce_eager  # 128 heads / TP 2 = 64 per NPU: MLA graph mode allowed
    a3 = plan(
        DEEPSEEK_R1, PlanInput(npu_memory_bytes=A2_NPU, npus_per_node=16, chip="a3", quantization="ascend")
    )
    assert a3.fits
    assert a3.nodes == 1


def test_it_takes_the_bytes_of_an_already_quantized_checkpoint_as_they_are():
    quantized = {**DEEPSEEK_V2_LITE, "quantization": "W8A8_DYNAMIC", "weights_bytes": 17_000_000_000}
    result = plan(quantized, a2_node())
    assert result.quantization == "ascend"
    assert result.weights.total_bytes == 17_000_000_000
    assert not result.weights.estimated
    assert "quantized_checkpoint" in codes(result)


def test_it_warns_about_checkpoints_quantized_for_gpus():
    result = plan({**QWEN25_7B, "quantization": "fp8", "weights_bytes": 8_000_000_000}, a2_node())
    assert "quantization_unsupported" in codes(result)
    assert result.quantization is None


def test_it_serves_qwen25_7b_on_310p_in_float16_and_eager_mode():
    result = plan(
        QWEN25_7B, PlanInput(npu_memory_bytes=P310_NPU, npus_per_node=2, chip="310p", dtype="bfloat16")
    )
    assert result.dtype == "float16"
    assert result.enforce_eager
    assert "bf16_unsupported_on_310p" in codes(result)
    assert "eager_required_on_310p" in codes(result)
    assert result.fits
    assert result.kv_cache_tokens >= 32768


def test_it_serves_310p_in_float16_even_when_dtype_is_auto():
    result = plan(QWEN25_7B, PlanInput(npu_memory_bytes=P310_NPU, npus_per_node=1, chip="310p"))
    assert result.dtype == "float16"


def test_it_rejects_tp_that_does_not_divide_heads():
    result = plan(QWEN25_7B, a2_node(tensor_parallel_size=8))  # 28 heads
    assert not result.fits
    assert codes(result) == ["tp_does_not_divide_heads"]


def test_it_never_recommends_a_tp_that_does_not_divide_heads():
    result = plan(QWEN25_7B, a2_node(max_model_len=4096))
    assert 28 % result.tensor_parallel_size == 0


def test_it_rejects_tp_that_does_not_divide_kv_heads():
    odd = {**QWEN25_7B, "num_attention_heads": 24, "num_kv_heads": 6}
    result = plan(odd, a2_node(tensor_parallel_size=4))
    assert "tp_does_not_divide_kv_heads" in codes(result)


def test_it_rejects_tp_larger_than_a_node():
    result = plan(QWEN25_72B, a2_node(nodes=2, tensor_parallel_size=16))
    assert not result.fits
    assert "tp_exceeds_node" in codes(result)


def test_it_rejects_more_npus_than_there_are():
    result = plan(QWEN25_7B, a2_node(tensor_parallel_size=4, data_parallel_size=4))
    assert "not_enough_npus" in codes(result)


def test_it_forces_eager_for_mla_models_with_too_few_heads_per_npu():
    result = plan(DEEPSEEK_V2_LITE, a2_node())
    assert result.fits
    assert result.tensor_parallel_size == 1
    assert result.enforce_eager
    warning = next(r for r in result.reasons if r.code == "mla_graph_mode_heads")
    assert warning.params == {"tp": 1, "heads": 16}


def test_it_says_how_long_a_sequence_fits_when_one_full_one_does_not():
    result = plan(QWEN25_72B, PlanInput(npu_memory_bytes=A2_NPU, npus_per_node=4, max_model_len=32768 * 8))
    assert "max_model_len_exceeds_model" in codes(result)
    assert not result.fits
    too_small = next(r for r in result.reasons if r.code == "kv_too_small")
    assert too_small.params["tokens"] == result.kv_cache_tokens < 32768 * 8


def test_it_says_dense_models_beyond_a_node_need_pipeline_parallel():
    result = plan(QWEN25_72B, PlanInput(npu_memory_bytes=A2_NPU, npus_per_node=1, nodes=4))
    assert not result.fits
    assert "weights_do_not_fit" in codes(result)
    assert "dense_needs_pipeline" in codes(result)
    assert "fits_as_w8a8" not in codes(result)  # 68 GiB of W8A8 does not fit one 64 GiB NPU either


def test_its_memory_bar_adds_up_to_the_npu():
    result = plan(QWEN25_72B, a2_node())
    bar = result.memory
    assert bar.weights_bytes + bar.kv_cache_bytes + bar.reserve_bytes + bar.free_bytes == A2_NPU
    assert bar.free_bytes == pytest.approx((A2_NPU - memory.DRIVER_RESERVED_BYTES["910b"]) * 0.1, rel=1e-6)


def test_it_reports_missing_facts_instead_of_guessing():
    result = plan({**QWEN25_7B, "num_layers": None}, a2_node())
    assert not result.fits
    assert codes(result) == ["facts_missing"]
    assert "num_layers" in result.reasons[0].message


@pytest.mark.parametrize(
    ("field", "value"),
    [("gpu_memory_utilization", 1.5), ("chip", "910c"), ("dtype", "int8"), ("npu_memory_bytes", 64)],
)
def test_it_rejects_impossible_input_naming_the_field(field, value):
    with pytest.raises(PlanInputError, match=field):
        plan(QWEN25_7B, a2_node(**{field: value}))


def test_every_reason_template_formats_with_its_own_params():
    for code in ("plan", "needs_more_nodes", "fits_as_w8a8", "kv_too_small", "weights_do_not_fit"):
        assert "%" in TEMPLATES[code]
    for result in (plan(DEEPSEEK_V2, a2_node()), plan(QWEN25_72B, a2_node())):
        for reason in result.reasons:
            assert reason.message
            assert "%(" not in reason.message


def test_its_json_has_the_documented_keys():
    document = plan(QWEN25_72B, a2_node()).as_dict()
    for key in (
        "fits",
        "tensor_parallel_size",
        "data_parallel_size",
        "nodes",
        "weights_gb_per_npu",
        "kv_cache_tokens",
        "max_concurrent_seqs",
        "reasons",
    ):
        assert key in document
    assert document["weights_gb_per_npu"] == pytest.approx(145_412_407_296 / 4 / GIB, abs=0.01)
    json.dumps(document)


def test_the_cli_plans_a_folder_with_only_config_and_index(tmp_path, capsys):
    config = {
        "architectures": ["Qwen2ForCausalLM"],
        "model_type": "qwen2",
        "torch_dtype": "bfloat16",
        "hidden_size": 8192,
        "num_hidden_layers": 80,
        "num_attention_heads": 64,
        "num_key_value_heads": 8,
        "vocab_size": 152064,
        "max_position_embeddings": 32768,
        "tie_word_embeddings": False,
    }
    (tmp_path / "config.json").write_text(json.dumps(config))
    index = {"metadata": {"total_size": 145_412_407_296}, "weight_map": {}}
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(index))
    status = plan_main([str(tmp_path), "--npu-memory-gb", "64", "--npus-per-node", "8"])
    document = json.loads(capsys.readouterr().out)
    assert status == 0
    assert document["fits"]
    assert document["tensor_parallel_size"] == 4
    assert document["weights_gb_per_npu"] == pytest.approx(33.86, abs=0.01)


def test_the_cli_exits_1_with_reasons_when_it_does_not_fit(tmp_path, capsys):
    config = {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": 8192}
    (tmp_path / "config.json").write_text(json.dumps(config))
    status = plan_main([str(tmp_path), "--npu-memory-gb", "64", "--npus-per-node", "8"])
    assert status == 1
    assert json.loads(capsys.readouterr().out)["reasons"][0]["code"] == "facts_missing"


def test_the_cli_exits_2_for_a_folder_that_is_no_model(tmp_path, capsys):
    assert plan_main([str(tmp_path), "--npu-memory-gb", "64", "--npus-per-node", "8"]) == 2
    assert "config.json" in capsys.readouterr().err


def test_config_extras_add_expert_sizes_the_facts_lack():
    facts = {**DEEPSEEK_V2_LITE, "moe": {"routed_experts": 64, "shared_experts": 2, "experts_per_token": 6}}
    config = {"moe_intermediate_size": 1408, "first_k_dense_replace": 1, "tie_word_embeddings": False}
    extended = with_config_extras(facts, config)
    assert extended["moe"]["moe_intermediate_size"] == 1408
    assert memory.routed_expert_params(extended) == 26 * 64 * 3 * 2048 * 1408
