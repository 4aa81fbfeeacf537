"""Which prefill and decode NPUs hand KV to each other over vllm-ascend's MooncakeConnectorV1
(workers/engine/launch/kv_pairs.py): the pairs the disaggregated preflight pings. Expected pairs are written
out by hand from what the connector does (its module docstring has the sources)."""

import pytest

from workers.engine.launch.kv_pairs import EngineRanks, engine_ranks, heads_of, npu_pairs, tp_pairs


@pytest.mark.parametrize(
    ("rank", "tp", "heads", "held"),
    [
        (0, 2, 8, {0, 1, 2, 3}),
        (1, 2, 8, {4, 5, 6, 7}),
        (3, 4, 4, {3}),
        (5, 8, 2, {1}),  # ranks 4-7 hold the second head
        (0, 16, 1, {0}),  # MLA: one latent head on every rank
    ],
)
def test_a_rank_holds_the_kv_heads_tensor_parallel_gives_it(rank, tp, heads, held):
    assert heads_of(rank, tp, heads) == held


def test_equal_tp_pairs_each_rank_with_the_same_rank_only_whatever_the_model():
    for mla, heads in ((False, 8), (False, 1), (True, None)):
        assert tp_pairs(4, 4, kv_heads=heads, mla=mla) == [(0, 0), (1, 1), (2, 2), (3, 3)]


def test_a_gqa_decode_rank_pulls_its_heads_from_a_fixed_block_of_prefill_ranks():
    # 8 KV heads, prefill TP 4 (2 heads a rank), decode TP 2 (4 heads a rank): decode 0 pulls from 0 and 1.
    assert tp_pairs(4, 2, kv_heads=8, mla=False) == [(0, 0), (1, 0), (2, 1), (3, 1)]
    assert tp_pairs(8, 1, kv_heads=8, mla=False) == [(p, 0) for p in range(8)]


def test_more_prefill_ranks_than_kv_heads_pair_a_decode_rank_with_every_replica_of_its_heads():
    # 2 KV heads, prefill TP 8 (head 0 on ranks 0-3, head 1 on 4-7): the replica is drawn per request.
    assert tp_pairs(8, 2, kv_heads=2, mla=False) == [(p, 0) for p in range(4)] + [(p, 1) for p in range(4, 8)]
    # Decode TP 4 also above the heads: decode 0 and 1 hold head 0, 2 and 3 head 1.
    assert sorted(tp_pairs(8, 4, kv_heads=2, mla=False)) == sorted(
        [(p, d) for p in range(4) for d in (0, 1)] + [(p, d) for p in range(4, 8) for d in (2, 3)]
    )


def test_an_mla_model_pairs_every_prefill_rank_with_every_decode_rank_when_the_tp_differ():
    assert tp_pairs(4, 2, kv_heads=128, mla=True) == [(p, d) for p in range(4) for d in range(2)]


def test_unknown_heads_rule_no_pair_out():
    assert tp_pairs(2, 1, kv_heads=None, mla=False) == [(0, 0), (1, 0)]


def test_an_engines_npus_by_dp_and_tp_rank_follow_its_visible_devices_order():
    launch = {"logic_ids": [4, 5, 6, 7], "tensor_parallel_size": 2, "data_parallel_size": 2}
    assert engine_ranks("n", launch) == EngineRanks("n", ((4, 5), (6, 7)))
    assert engine_ranks("n", {"logic_ids": [3, 1], "tensor_parallel_size": 2}).dp_ranks == ((3, 1),)


def test_npu_pairs_cross_every_dp_rank_of_the_prefill_with_every_dp_rank_of_the_decode():
    prefill = engine_ranks("p", {"logic_ids": [0, 1, 2, 3], "tensor_parallel_size": 2})  # TP 2 x DP 2
    decode = engine_ranks("d", {"logic_ids": [4, 5], "tensor_parallel_size": 1})  # TP 1 x DP 2
    # 2 KV heads: the decode's one rank holds both, so it pulls from both ranks of a prefill DP rank.
    assert npu_pairs(prefill, decode, kv_heads=2, mla=False) == {
        ("p", p, "d", d) for p in (0, 1, 2, 3) for d in (4, 5)
    }


def test_npu_pairs_of_equal_tp_keep_rank_to_rank_within_each_dp_pair():
    prefill = engine_ranks("p", {"logic_ids": [0, 1], "tensor_parallel_size": 2})
    decode = engine_ranks("d", {"logic_ids": [2, 3, 6, 7], "tensor_parallel_size": 2})  # DP 2
    assert npu_pairs(prefill, decode, kv_heads=8, mla=False) == {
        ("p", 0, "d", 2), ("p", 1, "d", 3), ("p", 0, "d", 6), ("p", 1, "d", 7),
    }  # fmt: skip


def test_an_engine_without_npus_pairs_nothing():
    cpu = engine_ranks("c", {"logic_ids": [], "tensor_parallel_size": 1})
    assert npu_pairs(cpu, engine_ranks("d", {"logic_ids": [0]}), kv_heads=2, mla=False) == set()
