"""Which one binds the engine's CPUs, vllm-ascend or the panel's numactl, per stack version and host."""

import pytest

from workers.engine.launch.binder import ENGINE, NONE, NUMACTL, HostCpus, choose_binding, cpus_per_npu

# Kunpeng 920 with an Atlas 800I A2: 4 NUMA nodes of 48 CPUs, two NPUs on each.
KUNPENG_A2 = HostCpus(
    arch="aarch64",
    logical_cpus=192,
    threads_per_core=1,
    numa_cpus={0: 48, 1: 48, 2: 48, 3: 48},
    npu_numa=(0, 0, 1, 1, 2, 2, 3, 3),
)


def codes(binding):
    return [item.code for item in binding.reasons]


def test_from_0_18_0rc1_the_engine_binds_and_numactl_goes():
    binding = choose_binding("0.18.0rc1", "910b", KUNPENG_A2, numa_node=0)
    assert binding.binder == ENGINE
    assert binding.numa_node is None  # no numactl wrapper
    assert binding.enable_cpu_binding is True  # the engine's default, made explicit
    assert codes(binding) == ["cpu_binding_engine"]
    assert "stops irqbalance" in binding.reasons[0].message
    assert "this host has 24" in binding.reasons[0].message


def test_the_engine_also_binds_npus_spread_over_numa_nodes_which_numactl_cannot():
    assert choose_binding("0.23.0", "910b", KUNPENG_A2, numa_node=None).binder == ENGINE


def test_before_0_18_numactl_binds_and_the_engine_binder_is_turned_off_explicitly():
    binding = choose_binding("0.13.0", "910b", KUNPENG_A2, numa_node=1)
    assert (binding.binder, binding.numa_node, binding.enable_cpu_binding) == (NUMACTL, 1, False)
    assert codes(binding) == ["cpu_binding_old", "cpu_binding_numactl"]


def test_releases_before_the_key_existed_get_no_key():
    binding = choose_binding("0.7.3", "910b", KUNPENG_A2, numa_node=1)
    assert (binding.binder, binding.enable_cpu_binding) == (NUMACTL, None)


def test_an_unknown_version_keeps_numactl_and_turns_the_engine_binder_off():
    binding = choose_binding(None, "910b", KUNPENG_A2, numa_node=2)
    assert (binding.binder, binding.enable_cpu_binding) == (NUMACTL, False)
    assert codes(binding) == ["cpu_binding_unknown", "cpu_binding_numactl"]


def test_the_engine_binder_acts_on_arm_only():
    x86 = HostCpus(arch="x86_64", logical_cpus=192, npu_numa=(0,) * 8)
    binding = choose_binding("0.23.0", "910b", x86, numa_node=0)
    assert (binding.binder, binding.enable_cpu_binding) == (NUMACTL, False)
    assert codes(binding)[0] == "cpu_binding_not_arm"


def test_too_few_cpus_per_npu_keep_numactl_with_a_warning():
    # An A3 slices all the host's CPUs evenly over its 16 logical NPUs: 64 CPUs give 4, it needs 5.
    small_a3 = HostCpus(
        arch="aarch64", logical_cpus=64, numa_cpus={0: 32, 1: 32}, npu_numa=(0,) * 8 + (1,) * 8
    )
    assert cpus_per_npu("a3", small_a3) == 4
    binding = choose_binding("0.23.0", "a3", small_a3, numa_node=0)
    assert binding.binder == NUMACTL
    assert binding.reasons[0].code == "cpu_binding_few_cpus"
    assert binding.reasons[0].level == "warning"
    assert "needs 5 CPUs per NPU and this host has 4" in binding.reasons[0].message


def test_a2_counts_cpus_per_numa_node_by_npu_affinity():
    # 32 CPUs on node 0 shared by 8 NPUs: 4 each, although the host has 128 CPUs for 8 NPUs.
    crowded = HostCpus(
        arch="aarch64", logical_cpus=128, numa_cpus={0: 32, 1: 32, 2: 32, 3: 32}, npu_numa=(0,) * 8
    )
    assert cpus_per_npu("910b", crowded) == 4
    assert cpus_per_npu("a3", crowded) == 16
    assert choose_binding("0.23.0", "910b", crowded, numa_node=0).binder == NUMACTL


def test_the_950_needs_a_whole_cpu_cluster_per_npu():
    smt = HostCpus(
        arch="aarch64", logical_cpus=256, threads_per_core=2, numa_cpus={0: 64, 1: 64}, npu_numa=(0,) * 8
    )
    assert choose_binding("0.23.0", "950", smt, numa_node=0).reasons[0].params["need"] == 16
    assert choose_binding("0.23.0", "950", smt, numa_node=0).binder == NUMACTL  # 64 / 8 = 8 < 16


@pytest.mark.parametrize("version", ["0.13.0", "0.23.0"])
def test_the_users_own_setting_decides(version):
    on = choose_binding(version, "910b", KUNPENG_A2, numa_node=0, user_setting=True)
    assert (on.binder, on.numa_node, on.enable_cpu_binding) == (ENGINE, None, None)
    off = choose_binding(version, "910b", KUNPENG_A2, numa_node=0, user_setting=False)
    assert (off.binder, off.numa_node, off.enable_cpu_binding) == (NUMACTL, 0, None)
    assert codes(off) == ["cpu_binding_user_off", "cpu_binding_numactl"]


def test_npus_over_several_numa_nodes_on_an_old_release_stay_unbound():
    binding = choose_binding("0.11.0", "910b", KUNPENG_A2, numa_node=None)
    assert (binding.binder, binding.enable_cpu_binding) == (NONE, False)
    assert codes(binding) == ["cpu_binding_old", "cpu_binding_unbound"]


def test_vllm_cpu_binds_nothing():
    assert choose_binding("0.23.0", "cpu", HostCpus(), numa_node=None) == choose_binding(
        None, "cpu", HostCpus(), None
    )
    assert choose_binding(None, "cpu", HostCpus(), None).binder == NONE


def test_unknown_host_facts_let_the_engine_bind_on_a_release_that_does():
    binding = choose_binding("0.23.0", "910b", HostCpus(), numa_node=0)
    assert binding.binder == ENGINE
    assert binding.reasons[0].params["have"] == "?"
