"""The wizard's choices and what the planner says of them, apart from its views (pages/wizard.py).

The choices so far live in the session under SESSION_KEY; `planned` runs plan_request, the check POST
/api/v1/deployments/ runs, on the body that POST would get. Its field errors are split per step: each step
shows its own and is blocked by an earlier step's. `memory_bars` and `review_context` are what the review
step and the deployment page show of a plan.
"""

from __future__ import annotations

from django.utils.translation import gettext_lazy

from panel.core.domain.errors import InvalidInput
from panel.deployments.launch.launch_review import launch_context
from panel.deployments.launch.launch_tuning import AdminOnlyEnv
from panel.deployments.pages.forms import WizardEngineForm
from panel.deployments.pages.topology_form import TOPOLOGY_SPEC_TO_FORM
from panel.deployments.placement.planning import plan_request
from panel.deployments.spec.request import AdminOnlyFlag

SESSION_KEY = "deployment_wizard"
STEPS = ("model", "placement", "engine", "review")
STEP_TITLES = {
    "model": gettext_lazy("Model"),
    "placement": gettext_lazy("Placement"),
    "engine": gettext_lazy("Engine settings"),
    "review": gettext_lazy("Review"),
}
# Which step owns each field of the API's request; errors on a field are shown on its step.
FIELD_STEP = {
    "name": "model",
    "model": "model",
    "artifact": "model",
    "path": "model",
    "nodes": "placement",
    **{name: "placement" for name in TOPOLOGY_SPEC_TO_FORM.values()},
    **{name: "engine" for name in WizardEngineForm.base_fields},
}
# API field → form field where the two differ.
FORM_FIELD = {"model": "artifact", "path": "artifact", "nodes": "npus"}
MEMORY_SEGMENTS = (
    ("weights_bytes", "mem-weights", gettext_lazy("Weights")),
    ("kv_cache_bytes", "mem-kv", gettext_lazy("KV cache")),
    ("reserve_bytes", "mem-reserve", gettext_lazy("Reserve")),
    ("free_bytes", "mem-free", gettext_lazy("Free")),
)
GIB = 1024**3


def load_state(request) -> dict:
    return dict(request.session.get(SESSION_KEY) or {})


def save_state(request, state: dict) -> None:
    request.session[SESSION_KEY] = state


def api_request(state: dict, engine: dict | None = None) -> dict:
    """The body POST /api/v1/deployments/ would get for these choices (empty settings: the planner's)."""
    values = {**(state.get("engine") or {}), **(engine or {})}
    # NPUs shared with others (placement/wizard_placement.py): the share that fits, until the engine step's.
    shared = state.get("share_utilization")
    body = {
        "name": state.get("name"),
        "model": state.get("model"),
        "artifact": state.get("artifact"),
        "nodes": state.get("nodes") or [],
        **({"share_npus": True, "gpu_memory_utilization": shared} if shared else {}),
        **values,
    }
    return {key: value for key, value in body.items() if value is not None}


def flatten(messages_or_nested) -> list[str]:
    """DRF error details (lists, nested dicts for `nodes`) as plain sentences."""
    if isinstance(messages_or_nested, dict):
        return [text for value in messages_or_nested.values() for text in flatten(value)]
    if isinstance(messages_or_nested, list | tuple):
        return [text for value in messages_or_nested for text in flatten(value)]
    return [str(messages_or_nested)]


def split_errors(errors: dict, step: str) -> tuple[dict[str, list[str]], list[dict]]:
    """(errors for this step's form fields, [{step, title, field, texts}] for fields of other steps)."""
    mine: dict[str, list[str]] = {}
    elsewhere: list[dict] = []
    for api_field, detail in errors.items():
        texts = flatten(detail)
        owner = FIELD_STEP.get(api_field, step)
        if owner == step or (step == "placement" and api_field == "tensor_parallel_size"):
            # With TP on automatic it is the number of chosen NPUs, so a TP error is a placement error.
            mine.setdefault(FORM_FIELD.get(api_field, api_field), []).extend(texts)
        else:
            elsewhere.append({"step": owner, "title": STEP_TITLES[owner], "field": api_field, "texts": texts})
    return mine, elsewhere


def attach(form, errors: dict[str, list[str]]) -> None:
    for field, texts in errors.items():
        target = field if field in form.fields else None
        for text in texts:
            form.add_error(target, text)


def blocking(elsewhere, step: str) -> bool:
    """Errors that belong to an earlier step (or to no field) block this one; later steps' do not yet."""
    current = STEPS.index(step)
    return any(STEPS.index(item["step"]) <= current for item in elsewhere)


def planned(state: dict, engine: dict | None = None, *, user):
    """(DeploymentPlan | None, field errors). A flag only admins may set is an error on the flags field."""
    try:
        return plan_request(api_request(state, engine), user=user), {}
    except AdminOnlyFlag as error:
        return None, {"extra_flags": [str(error.detail)]}
    except AdminOnlyEnv as error:
        return None, {"env": [str(error.detail)]}
    except InvalidInput as error:
        detail = error.detail if isinstance(error.detail, dict) else {"non_field_errors": error.detail}
        return None, detail


def memory_bars(review: dict) -> list[dict]:
    """One stacked bar per chosen NPU: weights / KV cache / reserve / free, in % of the NPU and GiB."""
    memory = review.get("memory_per_npu")
    if not memory or not memory.get("total_bytes"):
        return []
    total = memory["total_bytes"]
    segments = []
    for key, css, label in MEMORY_SEGMENTS:
        amount = max(memory.get(key) or 0, 0)
        segments.append(
            {"css": css, "label": label, "gib": amount / GIB, "pct": round(100 * amount / total, 2)}
        )
    bars = []
    for node in review.get("nodes") or []:
        for logic_id in node["logic_ids"]:
            bars.append(
                {"node": node["node"], "logic_id": logic_id, "segments": segments, "total_gib": total / GIB}
            )
    return bars


def review_context(plan) -> dict:
    review = plan.as_review()
    launch = launch_context(review.get("warnings") or [])
    return {
        "review": review,
        "memory_bars": memory_bars(review),
        "warnings": launch.pop("other"),
        "launch": launch,
        "planned_settings": plan.parts[0].payload if plan.parts else {},
    }
