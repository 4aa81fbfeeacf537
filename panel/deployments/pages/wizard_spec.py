"""The wizard's choices as the spec `PUT /api/v1/deployments/{name}/` takes, and that spec applied: dry, to
show each step what the spec's own checks and the planner say of it, and for real when Deploy is pressed.
There is no check of its own here: the spec's validation, the planner and the launch matrix decide, and
their errors are put back on the step that owns the field (`wizard_errors`)."""

from __future__ import annotations

from typing import Any

from panel.deployments.pages.autoscale_form import AUTOSCALE_SPEC_TO_FORM, ROLE_AUTOSCALE_SPEC_TO_FORM
from panel.deployments.pages.edit_views import Refused, run
from panel.deployments.pages.idle_form import IDLE_SPEC_TO_FORM
from panel.deployments.pages.topology_form import TOPOLOGY_SPEC_TO_FORM
from panel.deployments.spec.apply import Change, Outcome
from panel.deployments.spec.request import ENGINE_SETTINGS

# The spec's own names for what the wizard calls `nodes` (the placement step's NPUs).
PLACEMENT_KEYS = ("nodes", "placement", "placement.npus", "placement.node")
SPEC_TO_WIZARD = {
    **{key: "nodes" for key in PLACEMENT_KEYS},
    **TOPOLOGY_SPEC_TO_FORM,
    **AUTOSCALE_SPEC_TO_FORM,
    **ROLE_AUTOSCALE_SPEC_TO_FORM,
    **IDLE_SPEC_TO_FORM,
    "": "non_field_errors",
}


def is_split(state: dict[str, Any]) -> bool:
    return bool(state.get("roles"))


def spec_of_state(state: dict[str, Any], engine: dict[str, Any] | None = None) -> dict[str, Any]:
    """The spec for the wizard's choices so far; `engine`: the engine step's fields as they are now."""
    settings = {**(state.get("engine") or {}), **(engine or {})}
    spec: dict[str, Any] = {"name": state["name"], "model": str(state["model"])}
    spec["engine"] = {
        key: value for key, value in settings.items() if key in ENGINE_SETTINGS and value is not None
    }
    if settings.get("runtime"):
        spec["runtime"] = settings["runtime"]
    if settings.get("runtime") == "container":
        spec["image"] = settings.get("image") or ""
    if state.get("routing"):
        spec["routing"] = state["routing"]
    if state.get("idle"):
        spec["idle"] = state["idle"]
    if is_split(state):
        return _split_spec(spec, state)
    spec["artifact"] = state["artifact"]
    scale = state.get("autoscale")
    if scale:
        spec["autoscale"] = scale
    replicas = state.get("replicas") or 1
    if replicas != 1 and not scale:
        spec["replicas"] = replicas
    nodes = state.get("nodes") or []
    if len(nodes) == 1:
        # More than one engine: each takes as many NPUs of its own as chosen (the spec's count form).
        many = replicas > 1 or (scale and scale.get("max", 1) > 1)
        npus = nodes[0]["npus"]
        spec["placement"] = {"node": nodes[0]["node"], "npus": len(npus) if many else npus}
    elif nodes:
        spec["nodes"] = nodes
    if state.get("share_utilization") and "placement" in spec:  # NPUs shared with others, the share that fits
        spec["placement"]["share"] = True
        spec["engine"].setdefault("gpu_memory_utilization", state["share_utilization"])
    return spec


def _split_spec(spec: dict[str, Any], state: dict[str, Any]) -> dict[str, Any]:
    """Prefill and decode: each role's TP and DP follow its own NPUs, so the engine step's do not apply;
    the chosen copy is named only when every role runs on its node (elsewhere each node's own copy). A role
    that scales with the load starts at its min (its count is the autoscaler's, as a plain one's)."""
    for key in ("tensor_parallel_size", "data_parallel_size"):
        spec["engine"].pop(key, None)
    spec["kv_connector"] = state.get("kv_connector")
    spec["roles"] = {
        role: {key: value for key, value in entry.items() if key != "replicas" or not entry.get("autoscale")}
        for role, entry in state["roles"].items()
    }
    nodes = {(entry.get("placement") or {}).get("node") or "" for entry in state["roles"].values()}
    if nodes <= {"", state.get("artifact_node") or ""}:
        spec["artifact"] = state["artifact"]
    return spec


def wizard_errors(errors: dict[str, list[str]]) -> dict[str, list[str]]:
    """The spec's dotted error names as the wizard's (`engine.port` → `port`, `placement.npus` → `nodes`)."""
    out: dict[str, list[str]] = {}
    for key, texts in errors.items():
        name = SPEC_TO_WIZARD.get(key)
        if name is None:
            name = key.removeprefix("engine.") if key.startswith("engine.") else key
            if name.startswith("roles."):
                name = "topology"
        out.setdefault(name, []).extend(texts)
    return out


def dry_run(state: dict[str, Any], user, engine: dict[str, Any] | None = None):
    """(Outcome | None, the wizard's field errors): what applying the spec would do, without doing it."""
    try:
        return run(state["name"], spec_of_state(state, engine), user, dry_run=True), {}
    except Refused as refused:
        return None, wizard_errors(refused.errors)


def deploy(state: dict[str, Any], user) -> Outcome:
    """Apply the spec for real (raises Refused with the wizard's field names)."""
    try:
        return run(state["name"], spec_of_state(state), user, dry_run=False, change=Change(cause="create"))
    except Refused as refused:
        raise Refused(wizard_errors(refused.errors)) from None
