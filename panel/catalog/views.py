from django.contrib import messages
from django.core.exceptions import ValidationError
from django.shortcuts import get_object_or_404, redirect, render
from django.utils.translation import gettext as _
from django.views.decorators.http import require_POST, require_safe

from panel.accounts.roles import OPERATOR, VIEWER
from panel.catalog import copies, services
from panel.catalog.forms import AtcForm, ConvertForm, CopyForm, DownloadForm, RegisterModelForm
from panel.catalog.models import Model, ModelArtifact
from panel.catalog.planning import fit_on_typical_node
from panel.core.choices import MODEL_OPERATION_KINDS
from panel.core.views import role_required
from panel.operations.models import Operation


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
    artifacts = model.artifacts.select_related("node", "made_from").prefetch_related("deployments")
    operations = Operation.objects.visible_to(request.user).filter(
        kind__in=MODEL_OPERATION_KINDS, target=model.name
    )
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
            "convert_form": ConvertForm(),
            "atc_form": AtcForm(),
            "copy_form": CopyForm(),
        },
    )


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
