"""Shared-NPU arithmetic (issue 36 item 3, panel/deployments/placement/hbm.py): what an NPU's HBM holds from
its sample and the planned shares of the deployments on it, who counts (a level-2 sleeper does not), and the
refusals an admin reads."""

from panel.deployments.placement.hbm import NpuHbm, Tenant, left_notes, problems
from workers.engine.planner.memory import GIB, engine_share, npu_memory, utilization_for

A2_MB = 65536  # a 64 GiB 910B as npu-smi reports it
SHARE_040_MB = 24985  # (65536 - 3072 driver) MiB x 0.4


def npu(*tenants: Tenant, sample_used_mb: float | None = 3340.0, logic_id: int = 3) -> NpuHbm:
    return NpuHbm("sim-a2", logic_id, "910b", A2_MB, sample_used_mb, list(tenants))


def test_an_engines_share_is_its_utilization_of_what_torch_npu_sees_as_the_planner_counts_it():
    assert engine_share(64 * GIB, "910b", 0.4) // 2**20 == SHARE_040_MB
    plan = npu_memory(64 * GIB, "910b", 0.4, weights=GIB, collective=0)
    assert plan.weights_bytes + plan.kv_cache_bytes + plan.reserve_bytes - 3 * GIB == engine_share(
        64 * GIB, "910b", 0.4
    )
    assert npu().share_mb(0.4) == SHARE_040_MB


def test_two_small_models_share_an_npu_when_their_sum_fits_and_a_third_is_refused_with_the_figures():
    first, second = Tenant("qwen-a", SHARE_040_MB, True), Tenant("qwen-b", SHARE_040_MB, True)
    assert problems([npu(first)], 0.4, "qwen-b") == []
    both = npu(first, second)
    assert both.planned_mb == 3072 + 2 * SHARE_040_MB
    assert both.free_mb == A2_MB - 3072 - 2 * SHARE_040_MB  # 12494 MiB
    assert problems([both], 0.4, "qwen-c") == [
        "NPU 3 on sim-a2 has 12.2 GiB free of 64.0 GiB; qwen-c needs 24.4 GiB at gpu_memory_utilization 0.4."
    ]
    assert problems([both], 0.2, "qwen-c") == []  # 12492 MiB: just fits
    assert both.utilization_room() == 0.2


def test_the_sample_counts_what_the_ledger_does_not_know_and_the_ledger_what_has_not_allocated_yet():
    tenant = Tenant("qwen-a", SHARE_040_MB, True)
    # Another process (not ours) holds 50 GiB: the sample sees it, the ledger cannot.
    foreign = npu(tenant, sample_used_mb=3340 + 50 * 1024)
    assert foreign.committed_mb == 3340 + 50 * 1024
    assert problems([foreign], 0.2, "qwen-b") != []
    # The engine is still loading (the sample shows the driver only): its planned share still counts.
    starting = npu(tenant, sample_used_mb=3340)
    assert starting.committed_mb == 3072 + SHARE_040_MB
    # No sample at all (a node silent for two minutes): the ledger alone.
    assert npu(tenant, sample_used_mb=None).free_mb == A2_MB - 3072 - SHARE_040_MB


def test_a_level_2_sleeper_gives_its_hbm_back_a_level_1_sleeper_keeps_it_for_its_wake():
    awake = Tenant("qwen-a", SHARE_040_MB, True)
    level1 = Tenant("qwen-b", SHARE_040_MB, True, sleep_level=1)
    level2 = Tenant("qwen-b", SHARE_040_MB, True, sleep_level=2)
    assert problems([npu(awake, level1)], 0.4, "qwen-c") != []
    assert problems([npu(awake, level2)], 0.4, "qwen-c") == []
    assert npu(awake, level2).planned_mb == 3072 + SHARE_040_MB


def test_an_npu_held_by_a_deployment_that_does_not_share_is_refused_by_its_name():
    alone = Tenant("big-model", SHARE_040_MB, False)
    assert problems([npu(alone, logic_id=0)], 0.1, "qwen-c") == [
        "NPU 0 on sim-a2 serves big-model, which does not share its NPUs."
    ]


def test_the_review_says_what_each_shared_npu_keeps_free():
    first = Tenant("qwen-a", SHARE_040_MB, True)
    note, ascend = left_notes([npu(first), npu(logic_id=4)], 0.4)  # NPU 4 is not shared: nothing to say
    assert note["level"] == "info"
    assert note["message"] == "NPU 3 on sim-a2 is shared with qwen-a: 12.2 GiB of 64.0 GiB stay free."
    # vllm-ascend's worker counts the other engines' HBM against the flag: the review says the launch adds it.
    assert (ascend["code"], ascend["level"]) == ("hbm_shared_vllm_ascend", "info")
    assert "adds the shares of the engines awake beside it" in ascend["message"]
    assert left_notes([npu(logic_id=4)], 0.4) == []


def test_the_largest_utilization_that_fits_is_offered_in_steps_of_a_twentieth():
    usable = 64 * GIB - 3 * GIB
    assert utilization_for(64 * GIB, "910b", usable) == 1.0
    assert utilization_for(64 * GIB, "910b", int(usable * 0.449)) == 0.4
    assert utilization_for(64 * GIB, "910b", 0) == 0.0


def test_a_replica_is_never_put_beside_an_engine_of_its_own_model():
    primary = Tenant("qwen-a", SHARE_040_MB, True, served="qwen-a")
    assert problems([npu(primary)], 0.1, "qwen-a-r2", served="qwen-a") == [
        "NPU 3 on sim-a2 already serves qwen-a (qwen-a): its replicas go on different NPUs."
    ]
    assert problems([npu(primary)], 0.1, "qwen-b", served="qwen-b") == []
