"""The wizard's last step: what the spec would create (the apply's dry run), and Deploy, which applies that
spec as `PUT /api/v1/deployments/{name}/` does. A name taken since the first step is refused there, never
applied over the deployment that took it."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.shortcuts import redirect
from django.urls import reverse
from django.utils.translation import gettext as _

from panel.core.domain.choices import DeploymentRole, RoutingPolicy
from panel.core.views import TRANSITION
from panel.deployments import services
from panel.deployments.pages.autoscale_form import TARGET_CHOICES
from panel.deployments.pages.edit_views import Refused
from panel.deployments.pages.topology_form import CONNECTOR_LABELS
from panel.deployments.pages.wizard_spec import deploy, dry_run, is_split
from panel.deployments.pages.wizard_state import (
    FIELD_STEP,
    STEP_TITLES,
    STEPS,
    api_request,
    review_context,
    save_state,
    split_errors,
)
from panel.deployments.spec.apply import Outcome
from panel.deployments.spec.request import DeploymentRequestSerializer
from panel.deployments.spec.roles_spec import ROLES


def name_taken(state: dict) -> dict[str, list[str]]:
    """The model step's own check of the name, run again: another deployment may have taken it since."""
    serializer = DeploymentRequestSerializer(data=api_request(state))
    serializer.is_valid()
    return {"name": [str(text) for text in serializer.errors["name"]]} if "name" in serializer.errors else {}


def review_page(request, state: dict, render_step):
    outcome: Outcome | None = None
    if request.method == "POST":
        errors = name_taken(state)
        if not errors:
            try:
                applied = deploy(state, request.user)
            except Refused as refused:
                errors = refused.errors
            except services.DeploymentConflict as error:
                messages.error(request, str(error))
                return redirect(request.path)
            else:
                save_state(request, {})
                name = applied.deployment.name if applied.deployment is not None else state["name"]
                text = _("Deployment {name} is starting.").format(name=name)
                messages.success(request, text, extra_tags=TRANSITION)
                return redirect("deployments:detail", name=name)
    else:
        outcome, errors = dry_run(state, request.user)
    mine, elsewhere = split_errors(errors, "review")
    problems = elsewhere + [
        {"step": "review", "title": STEP_TITLES["review"], "field": field, "texts": texts}
        for field, texts in mine.items()
    ]
    if outcome is not None and outcome.planned is None:  # e.g. the model's inspection is still running
        texts = [warning["message"] for warning in outcome.warnings]
        problems.append({"step": "model", "title": STEP_TITLES["model"], "field": "model", "texts": texts})
    context: dict[str, Any] = {"problems": problems, "state": state, "scaling": scaling_rows(state)}
    if outcome is not None and outcome.planned is not None:
        plan = outcome.planned
        context.update(review_context(plan))
        context["model"] = plan.data["model"]
        context["artifact"] = plan.data.get("artifact")
        context["roles"] = role_rows(outcome.spec or {}) if is_split(state) else []
        context["connector"] = CONNECTOR_LABELS.get(state.get("kv_connector") or "", "")
        context["replicas"] = (outcome.replicas or {}).get("wanted") or 1
    context["edit_urls"] = {key: reverse("deployments:wizard", kwargs={"step": key}) for key in STEPS}
    context["field_step"] = FIELD_STEP
    return render_step(request, "review", context)


def role_rows(spec: dict) -> list[dict]:
    """Each role as the dry run planned it: engines, node, NPUs per engine, TP and DP."""
    rows = []
    for role in ROLES:
        entry = (spec.get("roles") or {}).get(role) or {}
        placement = entry.get("placement") or {}
        engine = entry.get("engine") or {}
        rows.append(
            {
                "role": role,
                "label": DeploymentRole(role).label,
                "replicas": entry.get("replicas"),
                "node": placement.get("node") or "",
                "npus": placement.get("npus"),
                "tensor_parallel_size": engine.get("tensor_parallel_size"),
                "data_parallel_size": engine.get("data_parallel_size"),
            }
        )
    return rows


def scaling_rows(state: dict) -> dict:
    """Routing, autoscale (each role's, with roles) and idle as the review shows them."""
    scale = state.get("autoscale")
    target = next(iter((scale or {}).get("target", {}).items()), None)
    routing = state.get("routing") or RoutingPolicy.LEAST_OUTSTANDING
    roles = state.get("roles") or {}
    return {
        "routing_label": RoutingPolicy(routing).label,
        "autoscale": scale,
        "target": target,
        "target_label": dict(TARGET_CHOICES).get(target[0], target[0]) if target else "",
        "role_autoscale": [
            {"role": role, "label": DeploymentRole(role).label, "scale": roles[role]["autoscale"]}
            for role in ROLES
            if (roles.get(role) or {}).get("autoscale")
        ],
        "split": bool(roles),
        "idle": state.get("idle"),
    }
