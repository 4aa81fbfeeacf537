"""A deployment row as a plan makes it. `services.take_plan` fills a row this way and saves it; a dry run of
apply fills one that is never saved, to answer the spec the deployment would have (`ascend-panel diff`
shows it beside the live spec, as `kubectl diff` shows the server's dry run beside the live object)."""

from __future__ import annotations

from typing import Any

from panel.deployments.models import Deployment
from panel.deployments.placement.planning import DeploymentPlan
from panel.deployments.spec.spec import spec_of


def fill_from_plan(deployment: Deployment, planned: DeploymentPlan) -> None:
    """Set the fields the plan decides: model, copy, launch per node, the plan itself. Saves nothing."""
    data = planned.data
    deployment.model = data["model"]
    deployment.artifact = data.get("artifact")
    deployment.spec = {
        **planned.parts[0].payload,
        "parts": [
            {"node": part.node.name, "role": part.role, "launch": part.payload, "container": part.container}
            for part in planned.parts
        ],
    }
    deployment.plan = {
        "plan": planned.plan,
        "warnings": planned.warnings,
        "chip": planned.chip,
        "tuning": {"env": data.get("env") or {}, "mtp_tokens": data.get("mtp_tokens") or 0},
        "port_pinned": planned.port_pinned,
        "idle": dict(data["idle"]) if data.get("idle") else None,
        "share_npus": bool(data.get("share_npus")),  # placement/hbm.py: others may join its NPUs
    }
    if planned.parts[0].container:
        deployment.spec["container"] = {"image": planned.parts[0].container["image"]}
    deployment.runtime_kind = data["runtime"]


def spec_after(
    name: str, spec: dict[str, Any], result: str, planned: DeploymentPlan | None, current: Deployment | None
) -> dict[str, Any] | None:
    """The spec (`GET ?format=spec`'s shape) the deployment would have once `spec` is applied; None when
    nothing could be planned yet (a folder still to be registered or inspected). An unchanged deployment
    answers its own spec, so what a diff shows and what apply says always agree."""
    if result == "unchanged" and current is not None:
        return spec_of(current)
    if planned is None or not planned.parts:
        return None
    # The spec's labels too: a diff against a spec without them showed labels removed that were not.
    row = Deployment(
        name=name,
        replicas_wanted=spec["replicas"],
        desired_state=spec["state"],
        labels=spec["labels"],
        autoscale=spec.get("autoscale"),
        routing=spec.get("routing") or Deployment.routing.field.default,
    )
    fill_from_plan(row, planned)
    return spec_of(row)
