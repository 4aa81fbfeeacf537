"""The planner's prefill/decode split for the wizard's topology: from the model's facts, the NPU nodes on
offer like the one the model is staged on, and the prompt and output lengths the person expects, the P:D
counts and each role's NPUs per engine, or why disaggregation is not worth it
(workers.engine.planner.plan_pd.split, the advice Models > Recipes gives). The wizard fills the role fields
from it; the spec's apply decides."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from panel.catalog.planning import reason_text
from panel.core.domain.choices import DeploymentRole
from panel.deployments.launch.launch_tuning import node_stack
from panel.deployments.placement.npus import MIB, NodeBlock, chip_of
from panel.deployments.spec.roles_spec import ROLES
from workers.engine.planner.plan import PlanInput
from workers.engine.planner.plan_cli import with_config_extras
from workers.engine.planner.plan_pd import DEFAULT_TPOT_MS, Workload, split


@dataclass
class SplitAdvice:
    worth_it: bool
    reasons: list[str] = field(default_factory=list)
    roles: dict[str, dict[str, Any]] = field(default_factory=dict)  # role → Role.as_dict()


def split_advice(
    facts: dict[str, Any], blocks: list[NodeBlock], prompt: int, output: int
) -> SplitAdvice | None:
    """None when there is nothing to plan on (no facts, or the model's node has no NPUs)."""
    home = next((block for block in blocks if block.staged), None)
    if not facts or home is None or not home.rows:
        return None
    chip = chip_of([row.npu for row in home.rows])
    alike = [block for block in blocks if block.rows and chip_of([row.npu for row in block.rows]) == chip]
    sizes = [row.npu.hbm_total_mb for block in alike for row in block.rows if row.npu.hbm_total_mb]
    if not sizes:
        return None
    request = PlanInput(
        npu_memory_bytes=int(min(sizes) * MIB),
        npus_per_node=min(len(block.rows) for block in alike),
        nodes=len(alike),
        chip=chip,
    )
    found = split(
        with_config_extras(facts, facts.get("config") or {}),
        request,
        Workload(prompt, output, DEFAULT_TPOT_MS),
        node_stack(home.node).vllm_ascend,
    )
    roles = {
        role: {**part.as_dict(), "label": DeploymentRole(role).label}
        for role, part in (("prefill", found.prefill), ("decode", found.decode))
        if part is not None
    }
    return SplitAdvice(found.worth_it, [reason_text(item) for item in found.reasons], roles)


def advised_fields(advice: SplitAdvice) -> dict[str, int]:
    """The role fields the advice fills: engines, NPUs per engine, TP and DP of each role."""
    fields: dict[str, int] = {}
    for role in ROLES:
        entry = advice.roles.get(role)
        if entry is not None:
            fields[f"{role}_replicas"] = entry["replicas"]
            fields[f"{role}_npus"] = entry["npus_per_replica"]
            fields[f"{role}_tp"] = entry["tensor_parallel_size"]
            fields[f"{role}_dp"] = entry["data_parallel_size"]
    return fields
