"""What would fit when the model does not fit the NPUs on offer (workers.engine.planner.plan_proposals): more
nodes like these with TP x DP x EP, W8A8 weights, or another Ascend shape, each with its plan's own figures.
Facts are the public configs' (tests/planner_inputs.py)."""

from dataclasses import replace

import pytest

from tests.planner_inputs import (
    A2_NPU,
    DEEPSEEK_R1,
    DEEPSEEK_V2,
    P310_NPU,
    QWEN25_7B,
    QWEN25_72B,
    a2_node,
)
from workers.engine.launch.recipes import serving_recipes
from workers.engine.planner.memory import GIB
from workers.engine.planner.plan import PlanInput, plan
from workers.engine.planner.plan_cli import main as plan_main
from workers.engine.planner.plan_hardware import HARDWARE
from workers.engine.planner.plan_proposals import propose, with_proposals

R1 = {**DEEPSEEK_R1, "mtp_layers": 1}
PRO_NODE = PlanInput(npu_memory_bytes=P310_NPU, npus_per_node=2, chip="310p")  # two Atlas 300I Pro
DUO = HARDWARE["300i-duo"]


def by(proposals, hardware, label):
    return next(p for p in proposals if p.hardware == hardware and p.plan.weights.label == label)


def test_deepseek_r1_in_bf16_on_one_a2_node_is_offered_two_a2_nodes_as_w8a8_and_an_a3_node():
    result, proposals = with_proposals(R1, a2_node())
    assert not result.fits
    two_a2 = by(proposals, "", "W8A8")
    assert (two_a2.nodes, two_a2.npus, two_a2.expert_parallel) == (2, 16, 16)
    assert two_a2.plan.tensor_parallel_size * two_a2.plan.data_parallel_size == 16
    a3 = next(p for p in proposals if p.hardware == "a3")
    assert (a3.nodes, a3.npus, a3.chip) == (1, 16, "a3")
    assert a3.plan.weights.label == "W8A8"  # BF16 (1.25 TiB) needs two A3 nodes; W8A8 fits one
    # BF16 on A2 takes five nodes: 40 NPUs of 64 GiB, listed first as the weights as they are.
    assert proposals[0].hardware == ""
    assert proposals[0].plan.weights.label == "BF16"
    assert proposals[0].nodes == 5
    for proposal in proposals:
        assert proposal.plan.fits
        assert proposal.plan.kv_cache_tokens >= proposal.plan.max_model_len


def test_each_proposal_says_its_numbers_and_its_json_carries_the_same():
    proposal = by(propose(R1, a2_node()), "", "W8A8")
    shown = proposal.as_dict()
    text = proposal.reason.message
    assert text.startswith("Fits 2 node(s) of 8 NPUs like these (16 NPUs) as TP ")
    assert f"x EP 16 with W8A8 weights: {shown['weights_gb_per_npu']:.1f} GiB of weights" in text
    assert f"and {shown['kv_cache_gb_per_npu']:.1f} GiB of KV cache per NPU" in text
    assert shown["expert_parallel_size"] == 16
    assert shown["weights_gb_per_npu"] == pytest.approx(proposal.plan.weights_bytes_per_npu / GIB, abs=0.01)
    assert 35 < shown["weights_gb_per_npu"] < 50  # about 650 GiB of W8A8 over 16 NPUs, dense part on TP


def test_deepseek_v2_proposals_lay_out_dp_x_tp_as_the_launch_runs_it():
    proposals = propose(DEEPSEEK_V2, a2_node())
    bf16 = by(proposals, "", "BF16")
    # 128 heads: TP 4 keeps 32 per NPU (MLA graph mode), DP 4 over two nodes with expert parallel.
    assert (bf16.nodes, bf16.plan.tensor_parallel_size, bf16.plan.data_parallel_size) == (2, 4, 4)
    assert bf16.plan.enable_expert_parallel
    w8a8 = by(proposals, "", "W8A8")
    assert w8a8.nodes == 1  # W8A8 fits the node the user has: listed, as it needs fewer NPUs


def test_a_dense_model_is_never_spread_over_nodes_and_is_offered_bigger_npus():
    result, proposals = with_proposals(QWEN25_72B, PRO_NODE)
    assert not result.fits
    assert proposals
    assert all(p.nodes == 1 and p.hardware for p in proposals)  # nothing "like these": no pipeline parallel
    duo = next(p for p in proposals if p.hardware == "300i-duo")
    assert duo.chip == "310p"
    assert duo.npus_per_node == DUO.npus_per_node
    assert duo.plan.dtype == "float16"  # the 310P computes in float16 only
    a2 = next(p for p in proposals if p.hardware == "a2")
    assert a2.npus in (2, 4)


def test_a_model_that_fits_gets_no_proposals():
    for facts, request in (
        (QWEN25_72B, a2_node()),
        (QWEN25_7B, replace(PRO_NODE, npus_per_node=1, npu_memory_bytes=DUO.npu_memory_bytes)),
        (QWEN25_72B, PlanInput(npu_memory_bytes=A2_NPU, npus_per_node=16, chip="a3")),
    ):
        result, proposals = with_proposals(facts, request)
        assert result.fits
        assert proposals == []


def test_the_same_shape_is_not_proposed_twice_as_another_kind():
    proposals = propose(R1, a2_node())
    assert not [p for p in proposals if p.hardware == "a2"]  # 8 x 64 GiB 910B is the A2 shape itself
    assert plan(R1, a2_node()).reasons[0].code == "needs_more_nodes"


def test_the_cli_prints_the_proposals_and_the_split(tmp_path, capsys):
    import json

    config = {
        "architectures": ["Qwen2ForCausalLM"],
        "model_type": "qwen2",
        "hidden_size": 8192,
        "num_hidden_layers": 80,
        "num_attention_heads": 64,
        "num_key_value_heads": 8,
        "vocab_size": 152064,
        "max_position_embeddings": 32768,
        "torch_dtype": "bfloat16",
        "intermediate_size": 29568,
    }
    (tmp_path / "config.json").write_text(json.dumps(config))
    index = {"metadata": {"total_size": QWEN25_72B["weights_bytes"]}, "weight_map": {}}
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(index))
    args = [str(tmp_path), "--npu-memory-gb", "21.02", "--npus-per-node", "2", "--chip", "310p"]
    assert plan_main(args) == 1
    answer = json.loads(capsys.readouterr().out)
    assert answer["fits"] is False
    assert {p["hardware"] for p in answer["proposals"]} >= {"a2", "300i-duo"}
    args = [str(tmp_path), "--npu-memory-gb", "64", "--npus-per-node", "8", "--nodes", "2"]
    assert plan_main([*args, "--prompt-tokens", "8192", "--output-tokens", "512"]) == 0
    answer = json.loads(capsys.readouterr().out)
    assert answer["proposals"] == []
    assert answer["pd"]["prefill"]["tensor_parallel_size"] == 4
    assert plan_main([*args, "--prompt-tokens", "8192"]) == 2


def _layouts(topology):
    """(nodes, TP, DP) of each instance a serving recipe's topology names, where it gives numbers."""
    roles = [topology[role] for role in ("prefill", "decode") if role in topology] or [topology]
    return [
        (role["nodes"], role["tensor_parallel_size"], role["data_parallel_size"])
        for role in roles
        if isinstance(role["tensor_parallel_size"], int)
    ]


def test_the_deepseek_recipes_layouts_fit_by_the_planners_own_memory_model():
    # Data checked against the model it is for: a recipe whose layout the planner says cannot hold DeepSeek-R1
    # in W8A8 at 16k tokens would be a typo in recipes.yaml (or a planner off by a node).
    checked = 0
    for recipe in serving_recipes():
        if "deepseek" not in recipe["models"]:
            continue
        shape = HARDWARE[recipe["hardware"]]
        for nodes, tp, dp in _layouts(recipe["topology"]):
            request = PlanInput(
                npu_memory_bytes=shape.npu_memory_bytes,
                npus_per_node=shape.npus_per_node,
                nodes=nodes,
                chip=shape.chip,
                quantization="ascend",
                max_model_len=16384,
                tensor_parallel_size=tp,
                data_parallel_size=dp,
            )
            result = plan(R1, request)
            assert result.fits, (recipe["id"], nodes, tp, dp, [r.message for r in result.reasons])
            assert tp * dp == nodes * shape.npus_per_node
            checked += 1
    assert checked == 4  # one A3 node, two A2 nodes, the 2P1D prefill and decode instances
