"""The NPUs a deployment may take: every node's NPUs with their figures (held or free, HBM free, health,
NUMA node), what is free, and a NUMA-node-whole pick of them. The wizard's placement step shows them
(placement/wizard_placement.py) and a spec's `placement:` picks from them (placement/placement.py).

Held means what POST /api/v1/deployments/ refuses (an NPU of a deployment that is not deleted), plus what
the live metrics show: a process on an NPU that no deployment accounts for is flagged, not hidden.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import redis

from panel.core.domain.choices import DesiredState, NpuHealth, NpuHealthState
from panel.deployments.models import Deployment
from panel.monitoring.metrics import store
from panel.nodes.models import Node, Npu

log = logging.getLogger(__name__)
MIB = 1024 * 1024
UNHEALTHY = (NpuHealth.ALARM, NpuHealth.CRITICAL)


def chip_of(npus: list[Npu]) -> str:
    if not npus:
        return "cpu"
    name = (npus[0].name or "").upper()
    if "310P" in name:
        return "310p"
    if "910_93" in name or name.startswith("A3") or "910C" in name:
        return "a3"
    if "950" in name:
        return "950"
    return "910b"


@dataclass
class NpuRow:
    npu: Npu
    value: str  # the checkbox value: "<node>:<logic id>"
    held_by: str = ""  # the deployment that holds it
    processes: list[dict] = field(default_factory=list)  # live: processes npu-smi shows on it
    hbm_used_mb: float | None = None
    hbm_total_mb: float | None = None
    aicore_pct: float | None = None
    suggested: bool = False

    @property
    def selectable(self) -> bool:
        return not self.held_by and self.npu.logic_id is not None

    @property
    def logic_id(self) -> int:
        """The NPU's logic id, which every selectable row has (free_rows gives only those)."""
        if self.npu.logic_id is None:
            raise ValueError(f"{self.value}: the inventory gave this NPU no logic id")
        return self.npu.logic_id

    @property
    def memory_mb(self) -> int:
        """What a model can use on the NPU, which every free row has (free_rows gives only those)."""
        if not self.npu.device_memory_mb:
            raise ValueError(f"{self.value}: the inventory gave this NPU no memory size")
        return self.npu.device_memory_mb

    @property
    def hbm_free_mb(self) -> float | None:
        total = self.hbm_total_mb or self.npu.device_memory_mb
        if total is None or self.hbm_used_mb is None:
            return None
        return max(total - self.hbm_used_mb, 0)

    @property
    def free_pct(self) -> float | None:
        total = self.hbm_total_mb or self.npu.device_memory_mb
        free = self.hbm_free_mb
        return None if free is None or not total else round(100 * free / total, 1)

    @property
    def health_colour(self) -> str:
        return NpuHealth.colour(self.npu.health)


@dataclass
class NodeBlock:
    node: Node
    staged: bool  # the chosen model copy lives on this node
    rows: list[NpuRow]
    live: bool  # live figures arrived recently

    @property
    def cpu_value(self) -> str:
        return f"{self.node.name}:cpu"

    @property
    def multi_chip(self) -> bool:
        """NPUs of two chips or more (310P Duo, A3): rows then name the chip too, as "1/0" and "1/1"."""
        return any(row.npu.chip_id for row in self.rows)

    @property
    def numa_nodes(self) -> list[int]:
        return sorted({row.npu.numa_node for row in self.rows if row.npu.numa_node is not None})


def held_npus(ignore: Deployment | None = None) -> dict[int, str]:
    """Npu pk -> name of the deployment that holds it (every deployment not being deleted but `ignore`)."""
    holders: dict[int, str] = {}
    live = Deployment.objects.exclude(desired_state=DesiredState.DELETED)
    if ignore is not None:
        live = live.exclude(pk=ignore.pk)
    rows = live.values_list("npus", "name")
    for npu_pk, name in rows:
        if npu_pk is not None:
            holders.setdefault(npu_pk, name)
    return holders


def live_figures(node_names: list[str]) -> dict[str, dict]:
    """Latest metrics message per node; empty when Redis cannot be reached (the page works without)."""
    try:
        return store.read_latest(node_names)
    except (redis.RedisError, OSError) as error:
        log.warning("live NPU figures unavailable for the wizard: %s", error)
        return {}


def node_blocks(nodes, artifact_node_id: int | None, ignore: Deployment | None = None) -> list[NodeBlock]:
    nodes = list(nodes.prefetch_related("npus"))
    holders = held_npus(ignore)
    live = live_figures([node.name for node in nodes])
    blocks = []
    for node in nodes:
        by_chip = {
            (n.get("npu_id"), n.get("chip_id")): n for n in (live.get(node.name) or {}).get("npus") or []
        }
        rows = []
        for npu in node.npus.all():
            figures = by_chip.get((npu.npu_id, npu.chip_id)) or {}
            rows.append(
                NpuRow(
                    npu=npu,
                    value=f"{node.name}:{npu.logic_id}",
                    held_by=holders.get(npu.pk, ""),
                    processes=list(figures.get("processes") or []),
                    hbm_used_mb=figures.get("hbm_used_mb", figures.get("memory_used_mb")),
                    hbm_total_mb=figures.get("hbm_total_mb") or figures.get("memory_total_mb"),
                    aicore_pct=figures.get("aicore_pct"),
                )
            )
        blocks.append(
            NodeBlock(node=node, staged=node.pk == artifact_node_id, rows=rows, live=node.name in live)
        )
    blocks.sort(key=lambda block: not block.staged)  # the node with the model first
    return blocks


def free_rows(block: NodeBlock) -> list[NpuRow]:
    """NPUs a new deployment may take: not held, nothing running on them, healthy, memory known."""
    return [
        row
        for row in block.rows
        if row.selectable
        and not row.processes
        and row.npu.health not in UNHEALTHY
        and row.npu.health_state != NpuHealthState.FAILED
        and row.npu.device_memory_mb
    ]


def on_one_numa_node(free: list[NpuRow], count: int) -> tuple[list[NpuRow], int | None]:
    """`count` free NPUs, all on one NUMA node when one has enough (the one with the fewest to spare,
    which keeps bigger groups whole for the next deployment, then the lowest ids); else the lowest ids."""
    groups: dict[int, list[NpuRow]] = {}
    for row in free:
        if row.npu.numa_node is not None:
            groups.setdefault(row.npu.numa_node, []).append(row)
    fitting = [
        (len(rows), min(row.logic_id for row in rows), numa)
        for numa, rows in groups.items()
        if len(rows) >= count
    ]
    if fitting:
        _size, _lowest, numa = min(fitting)
        return sorted(groups[numa], key=lambda row: row.logic_id)[:count], numa
    ordered = sorted(free, key=lambda row: row.logic_id)[:count]
    numas = {row.npu.numa_node for row in ordered}
    return ordered, numas.pop() if len(numas) == 1 else None
