"""A spec planned: the wizard's request a spec becomes (`build_request`: where it runs, which copy, and what
a changed deployment keeps when the spec leaves it out) and that request planned in place of a row
(`plan_for`), for the primary and for each replica (`plan_member`). apply and the rolling update both plan
this way, so neither imports the other to do it."""

from __future__ import annotations

from typing import Any, NoReturn

from django.utils.translation import gettext as _

from panel.catalog.models import SERVABLE_FORMATS, Model, ModelArtifact
from panel.core.domain.choices import NodeStatus, NpuHealthState
from panel.core.domain.errors import InvalidInput
from panel.deployments.models import Deployment
from panel.deployments.placement import placement
from panel.deployments.placement.planning import DeploymentPlan, plan_request
from panel.deployments.rollouts import replicas
from panel.deployments.spec.request import ENGINE_SETTINGS
from panel.deployments.spec.spec import engine_settings_of, nodes_of

# Engine settings the planner fills when a spec leaves them out; the rest have fixed defaults.
PLANNER_FILLS = ("tensor_parallel_size", "data_parallel_size", "max_model_len")
# Settings a spec that leaves them out keeps as they are (a new port would break every client).
KEPT_WHEN_LEFT_OUT = ("port", "served_model_name")


def refuse(field_name: str, message: str) -> NoReturn:
    raise InvalidInput({field_name: [message]})


def build_request(
    spec: dict[str, Any], model: Model, artifact: ModelArtifact | None, user, current: Deployment | None
) -> dict[str, Any]:
    """The wizard's request for this spec; a changed deployment keeps what the spec leaves to it."""
    engine = dict(spec["engine"])
    given = set(spec["engine_given"])
    if spec.get("nodes"):
        nodes = spec["nodes"]
    elif current is not None and _placement_kept(spec, current):
        nodes = nodes_of(current)
    else:
        ready = model.artifacts.filter(ready=True, format__in=SERVABLE_FORMATS)
        model_nodes = list(ready.values_list("node_id", flat=True))
        nodes = placement.resolve(
            spec.get("placement") or {},
            user=user,
            facts=dict(model.facts or {}) if model else {},
            model_node_ids=[artifact.node_id] if artifact else model_nodes,
            only_model_nodes=artifact is None and not spec["path"],
            replacing=current,
            name=spec["name"],
            utilization=engine.get("gpu_memory_utilization") or 0.9,
            served=engine.get("served_model_name") or "",
        )
    if current is not None:
        now = engine_settings_of(current)
        for key in KEPT_WHEN_LEFT_OUT:
            if key not in given:
                engine[key] = now[key]
        if nodes == nodes_of(current) and model.pk == current.model_id:
            for key in PLANNER_FILLS:
                if key not in given:
                    engine[key] = now[key]
    if artifact is None and not spec["path"]:
        artifact = copy_on(model, nodes[0]["node"])
    request = {key: engine.get(key) for key in ENGINE_SETTINGS}
    request.update(
        name=spec["name"],
        model=model.pk,
        artifact=artifact.pk if artifact else None,
        path="" if artifact else spec["path"],
        nodes=nodes,
        runtime=spec["runtime"],
        image=spec.get("image") or "",
        idle=dict(spec["idle"]) if spec.get("idle") else None,
        share_npus=bool((spec.get("placement") or {}).get("share")),
    )
    return {key: value for key, value in request.items() if value is not None}


def port_pinned(spec: dict[str, Any], current: Deployment | None) -> bool:
    """Is the port the user's? Given in the spec, or given before and kept since."""
    if "port" in spec["engine_given"]:
        return True
    return current is not None and bool((current.plan or {}).get("port_pinned"))


def copy_on(model: Model, node_name: str) -> ModelArtifact:
    """The copy of the model a spec that names only the model serves: the ready, servable one on the node
    (the newest when there are several)."""
    copy = (
        model.artifacts.filter(node__name=node_name, ready=True, format__in=SERVABLE_FORMATS)
        .order_by("-created")
        .first()
    )
    if copy is None:
        refuse(
            "model",
            _("{node} has no ready copy of {model}: copy it there, or give its folder as path.").format(
                node=node_name, model=model.name
            ),
        )
    return copy


def _placement_kept(spec: dict[str, Any], current: Deployment) -> bool:
    """Does the spec's placement describe where the deployment runs now? ("auto" always does.)"""
    if current.npus.filter(health_state=NpuHealthState.FAILED).exists():
        return False  # an NPU of it failed: placed again off it (panel/deployments/failover)
    if current.nodes.filter(status=NodeStatus.OFFLINE).exists():
        return False  # its node went silent (lost power): placed again on online nodes (failover)
    wanted = spec.get("placement") or {}
    now = nodes_of(current)
    if wanted.get("node") and [part["node"] for part in now] != [wanted["node"]]:
        return False
    npus = wanted.get("npus", "auto")
    if npus == "auto":
        return True
    held = sum(len(part["npus"]) for part in now)
    if isinstance(npus, int):
        return held == npus
    return len(now) == 1 and sorted(now[0]["npus"]) == npus


def plan_member(spec, model: Model, artifact, user, index: int, served: str, row: Deployment | None):
    """The plan of replica `index` (2..N), in place of `row` or as a new row."""
    member = replicas.spec_for(spec, index, served)
    request = build_request(member, model, artifact, user, row)
    return plan_for(request, member, user, row)


def plan_for(request: dict[str, Any], spec: dict[str, Any], user, row: Deployment | None) -> DeploymentPlan:
    """Plan the request in place of `row` (or as a new one). A spec that leaves `dtype` out asks for auto;
    a row that runs with the dtype auto comes to (bfloat16 for a bfloat16 model) keeps its own spelling,
    so applying it changes nothing."""
    pinned = port_pinned(spec, row)
    planned = plan_request(request, user=user, replacing=row, port_pinned=pinned)
    if row is None or "dtype" in spec["engine_given"]:
        return planned
    stored = (row.spec or {}).get("dtype")
    if stored in (None, request.get("dtype")) or (planned.plan or {}).get("dtype") != stored:
        return planned
    return plan_request({**request, "dtype": stored}, user=user, replacing=row, port_pinned=pinned)


def flat_errors(detail) -> str:
    if isinstance(detail, dict):
        return " ".join(flat_errors(value) for value in detail.values())
    if isinstance(detail, list):
        return " ".join(flat_errors(value) for value in detail)
    return str(detail)
