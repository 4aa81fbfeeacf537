"""The deployment wizard: model → placement → engine settings → review → deploy.

Server-rendered steps, one Django form each; what was chosen so far lives in the session. Every check is
panel.deployments.placement.planning.plan_request, the same code POST /api/v1/deployments/ runs, and its field
errors are shown on the step that owns the field. htmx re-plans the engine step as fields change.
"""

from __future__ import annotations

from django.http import Http404
from django.shortcuts import redirect, render
from django.utils.text import slugify
from django.utils.translation import gettext as _
from django.views.decorators.http import require_POST

from panel.accounts.roles import OPERATOR
from panel.catalog.models import SERVABLE_FORMATS, Model, ModelArtifact
from panel.core.domain.choices import ArtifactFormat, DesiredState
from panel.core.views import role_required
from panel.deployments.launch.containers import offer
from panel.deployments.launch.sleep_launch import sleep_problems
from panel.deployments.models import Deployment
from panel.deployments.pages.autoscale_form import (
    autoscale_from_form,
    roles_with_autoscale,
    wizard_autoscale_initial,
)
from panel.deployments.pages.forms import (
    ALLOWED_FLAG_NAMES,
    ModelStepForm,
    PlacementStepForm,
    WizardEngineForm,
    choices_from_nodes,
    env_as_text,
    flags_as_text,
)
from panel.deployments.pages.idle_form import idle_from_form
from panel.deployments.pages.split_advice import advised_fields, split_advice
from panel.deployments.pages.topology_form import SPLIT, connector_offers, topology_initial
from panel.deployments.pages.wizard_review import review_page
from panel.deployments.pages.wizard_spec import dry_run, is_split
from panel.deployments.pages.wizard_state import (
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
from panel.deployments.placement.npus import chip_of, node_blocks
from panel.deployments.placement.wizard_placement import describe, share_offers, shared_choice, suggest
from panel.deployments.spec.request import DeploymentRequestSerializer
from panel.nodes.models import Node
from workers.engine.launch.flags import CODE_LOADING_FLAGS


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
    if not state.get("nodes") and not is_split(state):
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
    shares = share_offers(artifact.model.facts or {}, blocks)  # NPUs others hold, shared when it fits
    choices += [(offer.value, offer.value) for offer in shares if not offer.why_not]
    topology = {
        "choices": choices,
        "offers": connector_offers(artifact.node),
        "nodes": [(block.node.name, block.node.name) for block in blocks],
    }
    elsewhere: list = []
    advice = None
    if request.method == "POST" and "suggest_split" in request.POST and request.POST.get("topology") == SPLIT:
        form, advice = _with_split_advice(request, artifact, blocks, topology)
    elif request.method == "POST":
        form = PlacementStepForm(request.POST, **topology)
        if form.is_valid():
            candidate = _placed(state, form, artifact)
            candidate["share_utilization"] = shared_choice(shares, form.cleaned_data["npus"])
            if is_split(candidate) or candidate.get("replicas", 1) != 1:
                _outcome, errors = dry_run(candidate, request.user)  # the spec's topology checks
            else:
                _plan, errors = planned(candidate, user=request.user)
            mine, elsewhere = split_errors(errors, "placement")
            attach(form, mine)
            if not form.errors and not blocking(elsewhere, "placement"):
                save_state(request, candidate)
                return redirect("deployments:wizard", step="engine")
    else:
        chosen = choices_from_nodes(state.get("nodes")) or (suggestion.values if suggestion else [])
        initial = {"npus": chosen, **topology_initial(state, artifact.node.name)}
        form = PlacementStepForm(initial=initial, **topology)
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
            "offers": topology["offers"],
            "split_usable": any(offer.usable for offer in topology["offers"]),
            "topology_node": artifact.node.name,
            "share_offers": shares,
            "split_advice": advice,
            "split_advice_offered": True,
        },
    )


def _with_split_advice(request, artifact, blocks, topology):
    """The planner's split for the lengths given, filled into the role fields (nothing is saved yet)."""
    data = request.POST.copy()
    form = PlacementStepForm(data, **topology)
    if not form.is_valid() and {"prompt_tokens", "output_tokens"} & set(form.errors):
        return form, None
    prompt, output = form.cleaned_data.get("prompt_tokens"), form.cleaned_data.get("output_tokens")
    if not prompt or not output:
        form.add_error("prompt_tokens", _("Give the expected prompt and output lengths to plan a split."))
        return form, None
    advice = split_advice(artifact.model.facts or {}, blocks, prompt, output)
    if advice is None:
        return form, None
    for name, value in advised_fields(advice).items():
        data[name] = str(value)
    return PlacementStepForm(data, **topology), advice


def _placed(state: dict, form: PlacementStepForm, artifact) -> dict:
    """The state with the placement step's choices: one pool's NPUs and count, or the two roles."""
    candidate = {
        key: value
        for key, value in state.items()
        if key not in ("engine", "nodes", "replicas", "roles", "kv_connector", "artifact_node")
    }  # TP and DP follow the NPUs: settings are planned again
    if form.cleaned_data["topology"] == SPLIT:
        roles = form.roles()
        for role, entry in (state.get("roles") or {}).items():  # its autoscaling, from the engine step
            if entry.get("autoscale") and role in roles:
                roles[role]["autoscale"] = entry["autoscale"]
        connector = form.cleaned_data["kv_connector"]
        candidate.update(roles=roles, kv_connector=connector, artifact_node=artifact.node.name)
        candidate.pop("autoscale", None)  # the plain one: each role has its own
    else:
        candidate.update(nodes=form.nodes(), replicas=form.cleaned_data.get("replicas") or 1)
    return candidate


def _plan_of(state: dict, engine: dict | None, user):
    """(plan | None, errors): the planner's word on the choices. Prefill and decode are planned by the spec's
    dry run (each role's engines); its plan is the first prefill engine's."""
    if is_split(state):
        outcome, errors = dry_run(state, user, engine)
        return (outcome.planned if outcome is not None else None), errors
    return planned(state, engine, user=user)


def _engine_initial(state: dict, user) -> dict:
    """Saved settings, or the planner's defaults for the chosen NPUs; how it scales and sleeps."""
    initial: dict = {
        "routing": state.get("routing"),
        **_scaling_initial(state),
    }
    if "engine" in state:
        engine = dict(state["engine"])
        engine["extra_flags"] = flags_as_text(engine.get("extra_flags") or {})
        engine["env"] = env_as_text(engine.get("env") or {})
        return {**engine, **initial}
    plan, _errors = _plan_of(state, None, user)
    initial.update(dtype="auto", gpu_memory_utilization=state.get("share_utilization") or 0.9)
    if plan is not None:
        payload = plan.parts[0].payload
        initial.update(
            max_model_len=payload.get("max_model_len"),
            dtype=(plan.plan or {}).get("dtype") or "auto",
            enforce_eager=payload.get("enforce_eager"),
            quantization=payload.get("quantization"),
        )
        if not is_split(state):  # each role's TP and DP follow its own NPUs
            initial.update(
                tensor_parallel_size=payload.get("tensor_parallel_size"),
                data_parallel_size=payload.get("data_parallel_size"),
            )
    return initial


def _scaling_initial(state: dict) -> dict:
    idle = state.get("idle")
    initial = {
        **wizard_autoscale_initial(state),
        "idle": bool(idle),
        "idle_sleep_after_s": 600,
        "idle_level": 1,
    }
    if idle:
        initial.update(idle_sleep_after_s=idle["sleep_after_s"], idle_level=idle["level"])
    return initial


def _with_scaling(state: dict, form: WizardEngineForm) -> dict:
    """The state with the engine step's fields: the engine settings, routing, autoscale and idle."""
    data = form.cleaned_data
    candidate = {**state, "engine": form.api_data(), "routing": data["routing"]}
    candidate["autoscale"] = None if is_split(state) else autoscale_from_form(data)
    if is_split(state):
        candidate["roles"] = roles_with_autoscale(state["roles"], data)
    candidate["idle"] = idle_from_form(data)
    return candidate


def sleep_refusal(plan) -> list[str]:
    """Why these engines cannot sleep (the planner's own reasons), so the step offers sleep only where it
    can; [] when they can."""
    if plan is None:
        return []
    return sleep_problems({"sleep_after_s": 600, "level": 1}, plan.parts, plan.chip)


def _engine_step(request, state):
    plan, errors, elsewhere = None, {}, []
    if request.method == "POST":
        form = WizardEngineForm(request.POST)
        if form.is_valid():
            candidate = _with_scaling(state, form)
            plan, errors = _plan_of(candidate, None, request.user)
            if plan is not None and not is_split(candidate):
                _outcome, errors = dry_run(candidate, request.user)  # the spec's replicas, autoscale, idle
            mine, elsewhere = split_errors(errors, "engine")
            attach(form, mine)
            if not form.errors and not blocking(elsewhere, "engine"):
                save_state(request, candidate)
                return redirect("deployments:wizard", step="review")
    else:
        form = WizardEngineForm(initial=_engine_initial(state, request.user))
        plan, errors = _plan_of(state, state.get("engine"), request.user)
        _mine, elsewhere = split_errors(errors, "engine")
    sleep_plan = plan or _plan_of({**state, "idle": None}, None, request.user)[0]  # for the sleep offer
    context = {
        "form": form,
        "elsewhere": elsewhere,
        "offers": runtime_offers(state),
        "allowed_flags": ALLOWED_FLAG_NAMES,
        "admin_only_flags": sorted(CODE_LOADING_FLAGS),
        "plan_errors": _form_errors(form),
        "split": is_split(state),
        "sleep_refused": sleep_refusal(sleep_plan),
    }
    if plan is not None:
        context.update(review_context(plan))
    return _render(request, "engine", context)


def runtime_offers(state: dict) -> list[dict]:
    """What each chosen node offers the runtime step: its venv stack, container engines and images."""
    chosen = list(state.get("nodes") or [])
    chosen += [
        {"node": (entry.get("placement") or {}).get("node") or state.get("artifact_node"), "npus": []}
        for entry in (state.get("roles") or {}).values()
    ]
    offers, seen = [], set()
    for choice in chosen:
        node = Node.objects.filter(name=choice.get("node")).first()
        if node is not None and node.pk not in seen:
            seen.add(node.pk)
            npus = list(node.npus.filter(logic_id__in=choice.get("npus") or []))
            if not npus and not choice.get("npus"):
                npus = list(node.npus.exclude(logic_id=None)[:1])  # a role's NPUs are counted, not chosen
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
    form = WizardEngineForm(request.POST)
    context: dict = {"form": form, "plan_errors": []}
    if form.is_valid():
        plan, errors = _plan_of(state, form.api_data(), request.user)
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
    out: list[tuple[str, str]] = []
    for api_field, detail in errors.items():
        field = form.fields.get(api_field)
        label = field.label if field is not None else labels.get(api_field, "")
        out.extend((str(label), text) for text in flatten(detail))
    return out


def _review_step(request, state):
    return review_page(request, state, _render)
