"""The deployment wizard: model → placement → engine settings → review → deploy.

Server-rendered steps, one Django form each; what was chosen so far lives in the session. Every check is
panel.deployments.planning.plan_request, the same code POST /api/v1/deployments/ runs, and its field
errors are shown on the step that owns the field. htmx re-plans the engine step as fields change.
"""

from __future__ import annotations

from django.contrib import messages
from django.http import Http404
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.text import slugify
from django.utils.translation import gettext as _
from django.views.decorators.http import require_POST

from panel.accounts.roles import OPERATOR
from panel.catalog.models import SERVABLE_FORMATS, Model, ModelArtifact
from panel.core.choices import ArtifactFormat, DesiredState
from panel.core.views import TRANSITION, role_required
from panel.deployments import services
from panel.deployments.containers import offer
from panel.deployments.forms import (
    ALLOWED_FLAG_NAMES,
    EngineStepForm,
    ModelStepForm,
    PlacementStepForm,
    choices_from_nodes,
    env_as_text,
    flags_as_text,
)
from panel.deployments.models import Deployment
from panel.deployments.planning import chip_of
from panel.deployments.request import DeploymentRequestSerializer
from panel.deployments.wizard_placement import describe, node_blocks, suggest
from panel.deployments.wizard_state import (
    FIELD_STEP,
    STEP_TITLES,
    STEPS,
    api_request,
    attach,
    blocking,
    flatten,
    load_state,
    planned,
    review_context,
    save_state,
    split_errors,
)
from panel.nodes.models import Node
from workers.engine.flags import CODE_LOADING_FLAGS


def _visible_nodes(user):
    return Node.objects.visible_to(user).exclude(cordoned=True)


def _artifacts(user):
    nodes = _visible_nodes(user)
    return (
        ModelArtifact.objects.filter(ready=True, node__in=nodes, format__in=SERVABLE_FORMATS)
        .select_related("model", "node")
        .order_by("model__name", "node__name")
    )


@role_required(OPERATOR)
def wizard_start(request):
    """A fresh wizard; ?artifact=<id> (from a model's page) preselects the copy to deploy."""
    state = {}
    if request.GET.get("artifact", "").isdigit():
        artifact = _artifacts(request.user).filter(pk=int(request.GET["artifact"])).first()
        if artifact is not None:
            state = {"artifact": artifact.pk, "model": artifact.model_id}
    save_state(request, state)
    return redirect("deployments:wizard", step="model")


@role_required(OPERATOR)
def wizard_step(request, step):
    if step not in STEPS:
        raise Http404
    state = load_state(request)
    missing = _first_missing_step(state)
    if STEPS.index(step) > STEPS.index(missing):
        return redirect("deployments:wizard", step=missing)
    return {
        "model": _model_step,
        "placement": _placement_step,
        "engine": _engine_step,
        "review": _review_step,
    }[step](request, state)


def _first_missing_step(state: dict) -> str:
    if not state.get("artifact"):
        return "model"
    if not state.get("nodes"):
        return "placement"
    if "engine" not in state:
        return "engine"
    return "review"


def _render(request, step: str, context: dict):
    state = load_state(request)
    reached = STEPS.index(_first_missing_step(state))
    steps = [
        {
            "key": key,
            "title": STEP_TITLES[key],
            "index": i + 1,
            "current": key == step,
            "reachable": i <= reached,
        }
        for i, key in enumerate(STEPS)
    ]
    return render(request, f"deployments/wizard_{step}.html", {"steps": steps, "step": step, **context})


def _model_step(request, state):
    artifacts = _artifacts(request.user)
    if request.method == "POST":
        form = ModelStepForm(request.POST, artifacts=artifacts)
        if form.is_valid():
            artifact = form.cleaned_data["artifact"]
            name = form.cleaned_data["name"] or _unused_name(artifact.model.name)
            candidate = {"name": name, "model": artifact.model_id, "artifact": artifact.pk}
            serializer = DeploymentRequestSerializer(data=api_request(candidate))
            serializer.is_valid()
            mine, _elsewhere = split_errors(
                {k: v for k, v in serializer.errors.items() if FIELD_STEP.get(k) == "model"}, "model"
            )
            attach(form, mine)
            if not form.errors:
                if state.get("artifact") != artifact.pk:
                    state = {}  # another model: the placement and settings chosen for the last one are stale
                state.update(candidate)
                save_state(request, state)
                return redirect("deployments:wizard", step="placement")
    else:
        form = ModelStepForm(
            initial={"artifact": state.get("artifact"), "name": state.get("name", "")}, artifacts=artifacts
        )
    # Models with only ONNX / .om copies are not for vLLM: they are not "to download first" either.
    unstaged = (
        Model.objects.visible_to(request.user)
        .exclude(pk__in=artifacts.values("model"))
        .exclude(artifacts__format__in=set(ArtifactFormat.values) - set(SERVABLE_FORMATS))
        .distinct()
        .order_by("name")
    )
    return _render(request, "model", {"form": form, "artifacts": artifacts, "unstaged": unstaged})


def _unused_name(model_name: str) -> str:
    base = slugify(model_name.rsplit("/", 1)[-1].replace(".", "-"))[:56] or "model"
    taken = set(
        Deployment.objects.exclude(desired_state=DesiredState.DELETED)
        .filter(name__startswith=base)
        .values_list("name", flat=True)
    )
    if base not in taken:
        return base
    return next(f"{base}-{n}" for n in range(2, 1000) if f"{base}-{n}" not in taken)


def _placement_step(request, state):
    artifact = ModelArtifact.objects.select_related("model", "node").filter(pk=state["artifact"]).first()
    if artifact is None:
        save_state(request, {})
        return redirect("deployments:wizard", step="model")
    blocks = node_blocks(_visible_nodes(request.user), artifact.node_id)
    suggestion = suggest(artifact.model.facts or {}, blocks)
    choices = [(row.value, row.value) for block in blocks for row in block.rows if row.selectable]
    choices += [(block.cpu_value, block.cpu_value) for block in blocks if not block.rows]
    elsewhere = []
    if request.method == "POST":
        form = PlacementStepForm(request.POST, choices=choices)
        if form.is_valid():
            nodes = form.nodes()
            candidate = {**state, "nodes": nodes}
            candidate.pop("engine", None)  # TP and DP follow the NPUs: settings are planned again
            _plan, errors = planned(candidate, user=request.user)
            mine, elsewhere = split_errors(errors, "placement")
            attach(form, mine)
            if not form.errors and not blocking(elsewhere, "placement"):
                save_state(request, candidate)
                return redirect("deployments:wizard", step="engine")
    else:
        chosen = choices_from_nodes(state.get("nodes")) or (suggestion.values if suggestion else [])
        form = PlacementStepForm(initial={"npus": chosen}, choices=choices)
    selected = set(form["npus"].value() or [])
    return _render(
        request,
        "placement",
        {
            "form": form,
            "artifact": artifact,
            "blocks": blocks,
            "selected": selected,
            "suggestion": suggestion,
            "suggestion_text": describe(suggestion),
            "elsewhere": elsewhere,
        },
    )


def _engine_initial(state: dict, user) -> dict:
    """Saved settings, or the planner's defaults for the chosen NPUs."""
    if "engine" in state:
        engine = dict(state["engine"])
        engine["extra_flags"] = flags_as_text(engine.get("extra_flags") or {})
        engine["env"] = env_as_text(engine.get("env") or {})
        return engine
    plan, _errors = planned(state, user=user)
    initial = {"dtype": "auto", "gpu_memory_utilization": 0.9}
    if plan is not None:
        payload = plan.parts[0].payload
        initial.update(
            tensor_parallel_size=payload.get("tensor_parallel_size"),
            data_parallel_size=payload.get("data_parallel_size"),
            max_model_len=payload.get("max_model_len"),
            dtype=(plan.plan or {}).get("dtype") or "auto",
            enforce_eager=payload.get("enforce_eager"),
            quantization=payload.get("quantization"),
        )
    return initial


def _engine_step(request, state):
    plan, errors, elsewhere = None, {}, []
    if request.method == "POST":
        form = EngineStepForm(request.POST)
        if form.is_valid():
            plan, errors = planned(state, form.api_data(), user=request.user)
            mine, elsewhere = split_errors(errors, "engine")
            attach(form, mine)
            if not form.errors and not blocking(elsewhere, "engine"):
                state["engine"] = form.api_data()
                save_state(request, state)
                return redirect("deployments:wizard", step="review")
    else:
        form = EngineStepForm(initial=_engine_initial(state, request.user))
        plan, errors = planned(state, state.get("engine"), user=request.user)
        _mine, elsewhere = split_errors(errors, "engine")
    context = {
        "form": form,
        "elsewhere": elsewhere,
        "offers": runtime_offers(state),
        "allowed_flags": ALLOWED_FLAG_NAMES,
        "admin_only_flags": sorted(CODE_LOADING_FLAGS),
        "plan_errors": _form_errors(form),
    }
    if plan is not None:
        context.update(review_context(plan))
    return _render(request, "engine", context)


def runtime_offers(state: dict) -> list[dict]:
    """What each chosen node offers the runtime step: its venv stack, container engines and images."""
    offers = []
    for choice in state.get("nodes") or []:
        node = Node.objects.filter(name=choice.get("node")).first()
        if node is not None:
            npus = list(node.npus.filter(logic_id__in=choice.get("npus") or []))
            offers.append(offer(node, chip_of(npus)))
    return offers


def _form_errors(form) -> list[tuple[str, str]]:
    """[(field label, message)] of a bound form, so a summary can name every field to fix."""
    if not form.is_bound:
        return []
    return [
        (str(form.fields[field].label) if field in form.fields else "", text)
        for field, texts in form.errors.items()
        for text in texts
    ]


@role_required(OPERATOR)
@require_POST
def wizard_plan(request):
    """htmx: the engine step's preview (memory plan, warnings, command) for the fields as they are now."""
    state = load_state(request)
    form = EngineStepForm(request.POST)
    context: dict = {"form": form, "plan_errors": []}
    if form.is_valid():
        plan, errors = planned(state, form.api_data(), user=request.user)
        context["plan_errors"] = _labelled(errors, form)
        if plan is not None:
            context.update(review_context(plan))
    else:
        context["plan_errors"] = _form_errors(form)
    return render(request, "deployments/wizard_plan_preview.html", context)


def _labelled(errors: dict, form) -> list[tuple[str, str]]:
    """[(field label, message)] so every error in the preview names its field."""
    labels = {
        "nodes": _("NPUs"),
        "model": _("Model"),
        "artifact": _("Model copy"),
        "name": _("Deployment name"),
    }
    out = []
    for api_field, detail in errors.items():
        field = form.fields.get(api_field)
        label = field.label if field is not None else labels.get(api_field, "")
        out.extend((str(label), text) for text in flatten(detail))
    return out


def _review_step(request, state):
    plan, errors = planned(state, user=request.user)
    if request.method == "POST" and plan is not None:
        deployment = services.create_deployment(plan, user=request.user)
        save_state(request, {})
        text = _("Deployment {name} is starting.").format(name=deployment.name)
        messages.success(request, text, extra_tags=TRANSITION)
        return redirect("deployments:detail", name=deployment.name)
    mine, elsewhere = split_errors(errors, "review")
    problems = elsewhere + [
        {"step": "review", "title": STEP_TITLES["review"], "field": field, "texts": texts}
        for field, texts in mine.items()
    ]
    context = {"problems": problems, "state": state}
    if plan is not None:
        context.update(review_context(plan))
        context["model"] = plan.data["model"]
        context["artifact"] = plan.data.get("artifact")
    context["edit_urls"] = {key: reverse("deployments:wizard", kwargs={"step": key}) for key in STEPS}
    return _render(request, "review", context)
