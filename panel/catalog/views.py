from django.contrib import messages
from django.core.exceptions import ValidationError
from django.shortcuts import get_object_or_404, redirect, render
from django.utils.translation import gettext as _
from django.views.decorators.http import require_POST, require_safe
from rest_framework.exceptions import ValidationError as DrfValidationError

from panel.accounts.roles import OPERATOR, VIEWER
from panel.catalog import copies, services
from panel.catalog.api.offer import offered
from panel.catalog.api.serializers import AdviceQuerySerializer, RecipeQuerySerializer
from panel.catalog.forms import AtcForm, ConvertForm, CopyForm, DownloadForm, RegisterModelForm
from panel.catalog.models import Model, ModelArtifact
from panel.catalog.planning import advice, fit_on_typical_node, hardware_rows
from panel.core.domain.choices import MODEL_OPERATION_KINDS
from panel.core.views import role_required
from panel.nodes.models import Node
from panel.operations.models import Operation
from workers.engine.launch.recipes import search_serving, serving_for


def params_label(params) -> str:
    """7615616512 → "7.6 B", 3_100_000 → "3.1 M"; the unit letters are the same in every language."""
    if not params:
        return "—"
    if params >= 10**9:
        return f"{params / 10**9:.1f} B"
    return f"{params / 10**6:.1f} M"


@role_required(VIEWER)
@require_safe
def model_list(request):
    models = list(Model.objects.visible_to(request.user).prefetch_related("artifacts__node"))
    for model in models:
        model.fit = fit_on_typical_node(model.facts)
        model.params_label = params_label(model.facts.get("params"))
    return render(request, "catalog/list.html", {"models": models})


@role_required(VIEWER)
@require_safe
def model_detail(request, pk):
    model = get_object_or_404(Model.objects.visible_to(request.user), pk=pk)
    artifacts = list(model.artifacts.select_related("node", "made_from").prefetch_related("deployments"))
    for artifact in artifacts:
        # One form per copy, each with its own ids: a label's `for` must name the field in its own form.
        prefix = f"id_artifact{artifact.pk}_%s"
        artifact.convert_form = ConvertForm(auto_id=prefix)
        artifact.atc_form = AtcForm(auto_id=prefix)
        artifact.copy_form = CopyForm(auto_id=prefix)
    operations = Operation.objects.visible_to(request.user).filter(
        kind__in=MODEL_OPERATION_KINDS, target=model.name
    )
    # The serving card's question, from its own GET form; the page's defaults when it has not been asked.
    question = AdviceQuerySerializer(data=request.GET or {"prompt_tokens": 2048, "output_tokens": 512})
    answer, problems = _advice(request, model, question)
    return render(
        request,
        "catalog/detail.html",
        {
            "model": model,
            "fit": fit_on_typical_node(model.facts),
            "params_label": params_label(model.facts.get("params")),
            "artifacts": artifacts,
            "operations": operations.select_related("node")[:20],
            "download_form": DownloadForm(),
            "advice": answer,
            "advice_query": question.data,
            "advice_nodes": request.GET.getlist("node"),
            "advice_errors": problems,
            "offered_nodes": Node.objects.visible_to(request.user).filter(npus__isnull=False).distinct(),
            "hardware": hardware_rows(),
            "recipes": serving_for(model.facts or {}, model.name),
        },
    )


@role_required(VIEWER)
@require_safe
def recipe_list(request):
    """Serving recipes per kind of node, searched by words and kind (as GET /api/v1/recipes/ answers)."""
    query = RecipeQuerySerializer(data=request.GET)
    found = []
    if query.is_valid():
        found = search_serving(
            query.validated_data.get("search", ""), query.validated_data.get("hardware", "")
        )
    context = {"recipes": found, "query": query.data, "errors": query.errors, "hardware": hardware_rows()}
    return render(request, "catalog/recipes.html", context)


def _advice(request, model, question) -> tuple[dict | None, dict]:
    """The serving card's answer and its field errors: on a kind of node, or on the named nodes' free NPUs."""
    if not question.is_valid():
        return None, question.errors
    asked = dict(question.validated_data)
    names = asked.pop("node", None)
    try:
        offer = offered(request.user, names) if names else None
    except DrfValidationError as error:
        return None, error.detail if isinstance(error.detail, dict) else {"node": error.detail}
    return advice(model.facts or {}, model.name, offer=offer, **asked), {}


def _started(request, operation, message):
    messages.info(request, message)
    return redirect("operations:detail", pk=operation.pk)


def _refused(request, error: ValidationError, model_pk):
    for field_messages in error.message_dict.values():
        for message in field_messages:
            messages.error(request, message)
    return redirect("catalog:detail", pk=model_pk)


@role_required(OPERATOR)
def model_register(request):
    form = RegisterModelForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        try:
            model, operation = services.register_model(user=request.user, **form.cleaned_data)
        except ValidationError as error:
            for field, errors in error.message_dict.items():
                form.add_error(field if field in form.fields else None, errors)
        else:
            if operation:
                return _started(
                    request, operation, _("%(model)s registered; inspecting it.") % {"model": model.name}
                )
            messages.info(request, _("%(model)s registered.") % {"model": model.name})
            return redirect("catalog:detail", pk=model.pk)
    return render(request, "catalog/register.html", {"form": form})


def _post_form(request, form_class):
    form = form_class(request.POST)
    if not form.is_valid():
        raise ValidationError({f: [str(m) for m in msgs] for f, msgs in form.errors.items()})
    return form.cleaned_data


@role_required(OPERATOR)
@require_POST
def model_download(request, pk):
    model = get_object_or_404(Model.objects.visible_to(request.user), pk=pk)
    try:
        data = _post_form(request, DownloadForm)
        operation = services.start_download(model, data["node"], request.user, data["path"])
    except ValidationError as error:
        return _refused(request, error, model.pk)
    return _started(request, operation, _("Download of %(model)s started.") % {"model": model.name})


@role_required(OPERATOR)
@require_POST
def model_inspect(request, pk):
    model = get_object_or_404(Model.objects.visible_to(request.user), pk=pk)
    try:
        data = _post_form(request, DownloadForm)
        operation = services.start_hub_inspection(model, data["node"], request.user)
    except ValidationError as error:
        return _refused(request, error, model.pk)
    return _started(request, operation, _("Reading %(model)s from the hub.") % {"model": model.name})


def _artifact_action(request, pk, action):
    artifact = get_object_or_404(
        ModelArtifact.objects.visible_to(request.user).select_related("model", "node"), pk=pk
    )
    try:
        operation = action(artifact)
    except ValidationError as error:
        return _refused(request, error, artifact.model_id)
    return _started(
        request,
        operation,
        _("%(kind)s of %(model)s started.")
        % {"kind": operation.get_kind_display(), "model": artifact.model.name},
    )


@role_required(OPERATOR)
@require_POST
def artifact_inspect(request, pk):
    return _artifact_action(request, pk, lambda a: copies.start_inspection(a, request.user))


@role_required(OPERATOR)
@require_POST
def artifact_convert(request, pk):
    def action(artifact):
        data = _post_form(request, ConvertForm)
        return copies.start_conversion(
            artifact,
            data["target"],
            request.user,
            data["backend"],
            data["device"] or "npu",
            data["path"],
            model_type=data["model_type"],
        )

    return _artifact_action(request, pk, action)


@role_required(OPERATOR)
@require_POST
def artifact_atc(request, pk):
    def action(artifact):
        data = _post_form(request, AtcForm)
        return copies.start_atc(
            artifact,
            request.user,
            input_shape=data["input_shape"],
            input_format=data["input_format"],
            soc_version=data["soc_version"],
            path=data["path"],
        )

    return _artifact_action(request, pk, action)


@role_required(OPERATOR)
@require_POST
def artifact_copy(request, pk):
    def action(artifact):
        data = _post_form(request, CopyForm)
        return copies.start_copy(artifact, data["target_node"], request.user, data["target_user"])

    return _artifact_action(request, pk, action)


@role_required(OPERATOR)
@require_POST
def artifact_delete(request, pk):
    return _artifact_action(request, pk, lambda a: copies.start_artifact_delete(a, request.user))
