from django.contrib import messages
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import FileResponse, Http404, HttpResponseForbidden
from django.shortcuts import get_object_or_404, redirect, render
from django.utils.translation import gettext as _
from django.views.decorators.http import require_GET, require_http_methods, require_POST, require_safe

from panel.accounts.roles import ADMIN, OPERATOR, VIEWER, has_role
from panel.core.views import role_required
from panel.nodes.lifecycle import deployments_to_drain
from panel.nodes.models import Node
from panel.operations.models import Operation
from panel.provisioning import gate, services, store
from panel.provisioning.forms import ProfileForm, UploadForm
from panel.provisioning.models import PackageFile
from panel.provisioning.profiles import CPU, cpu_row, profile_rows


def _node(request, name):
    return get_object_or_404(Node.objects.visible_to(request.user), name=name)


def _panel_url(request) -> str:
    return request.build_absolute_uri("/")


def _say_errors(request, error: ValidationError) -> None:
    for field_errors in error.message_dict.values():
        for message in field_errors:
            messages.error(request, message)


@role_required(VIEWER)
@require_safe
def overview(request):
    """The sidebar's Provisioning: every node with the stack it has and its last install, and the way to
    the package store and the stack profiles."""
    nodes = Node.objects.select_related("stack__install_operation").order_by("name")
    context = {"nodes": nodes, "packages": PackageFile.objects.count()}
    return render(request, "provisioning/overview.html", context)


@role_required(VIEWER)
@require_safe
def profiles(request):
    return render(request, "provisioning/profiles.html", {"rows": profile_rows(), "cpu": cpu_row()})


@role_required(VIEWER)
@require_safe
def node_provisioning(request, name):
    node = _node(request, name)
    stack = services.stack_of(node)
    checked = services.checked_profile(stack)
    default = checked or services.installed_profile(stack)
    default = default or (CPU if not node.npus.exists() else profile_rows()[0]["key"])
    form = ProfileForm(initial={"profile": default, "checked_profile": checked}, node=node)
    install = stack.install_operation
    gated = gate.relevant_preflight(stack, stack.preflight_profile) is not None
    return render(
        request,
        "provisioning/node.html",
        {
            "node": node,
            "stack": stack,
            "form": form,
            "install": install,
            "install_open": install is not None and not install.is_terminal,
            "preflight": stack.preflight_operation,
            "serving": deployments_to_drain(node),
            "can_operate": has_role(request.user, OPERATOR),
            "packages": PackageFile.objects.installable(),
            # The failed rows that block an install of the checked profile until fixed or overridden.
            "failed_checks": gate.failed_rows(stack) if gated else [],
            "can_override": has_role(request.user, ADMIN),
        },
    )


def _start(request, name, start, *, installing: bool = False):
    node = _node(request, name)
    form = ProfileForm(request.POST, installing=installing, node=node)
    if not form.is_valid():
        errors = [str(e) for field in ("profile", "pip_source") for e in form.errors.get(field, [])]
        messages.error(request, " ".join(errors) or _("Choose a profile and a package source."))
        return redirect("provisioning:node", name=node.name)
    try:
        operation = start(node, {**form.cleaned_data, "overrides": form.overrides()})
    except ValidationError as error:
        _say_errors(request, error)
        return redirect("provisioning:node", name=node.name)
    except PermissionDenied as error:
        messages.error(request, str(error))
        return redirect("provisioning:node", name=node.name)
    return redirect(f"{_node_url(node)}?operation={operation.pk}")


def _node_url(node) -> str:
    from django.urls import reverse

    return reverse("provisioning:node", args=[node.name])


@role_required(OPERATOR)
@require_POST
def run_preflight(request, name):
    return _start(
        request,
        name,
        lambda node, data: services.start_preflight(
            node,
            data["profile"],
            user=request.user,
            panel_url=_panel_url(request),
            pip_source=data["pip_source"],
        ),
    )


@role_required(OPERATOR)
@require_POST
def run_install(request, name):
    return _start(
        request,
        name,
        lambda node, data: services.start_install(
            node,
            data["profile"],
            user=request.user,
            panel_url=_panel_url(request),
            pip_source=data["pip_source"],
            allow_reboot=data["allow_reboot"],
            overrides=data["overrides"],
        ),
        installing=True,
    )


@role_required(OPERATOR)
@require_POST
def resume(request, name):
    node = _node(request, name)
    try:
        operation = services.resume_install(node, user=request.user, panel_url=_panel_url(request))
    except ValidationError as error:
        _say_errors(request, error)
        return redirect("provisioning:node", name=node.name)
    return redirect(f"{_node_url(node)}?operation={operation.pk}")


@role_required(OPERATOR)
@require_POST
def cancel(request, name):
    node = _node(request, name)
    operation = get_object_or_404(
        Operation.objects.visible_to(request.user), pk=request.POST.get("operation")
    )
    try:
        services.cancel(operation)
        messages.info(request, _("Cancel requested: the install stops before its next step."))
    except ValidationError as error:
        _say_errors(request, error)
    return redirect("provisioning:node", name=node.name)


@role_required(VIEWER)
@require_http_methods(["GET", "HEAD", "POST"])
def packages(request):
    form, status = UploadForm(), 200
    if request.method == "POST":
        if not has_role(request.user, OPERATOR):
            return HttpResponseForbidden()
        form = UploadForm(request.POST, request.FILES)
        if form.is_valid():
            try:
                package = store.add_package(
                    form.cleaned_data["file"],
                    user=request.user,
                    vendor_sha256=form.cleaned_data["vendor_sha256"],
                )
                if not package.sha256:
                    messages.warning(
                        request,
                        _("%(name)s: stored, waiting for an admin's approval.") % {"name": package.name},
                    )
                elif package.pending_sha256:
                    messages.warning(
                        request, _("%(name)s: the new file waits for confirmation.") % {"name": package.name}
                    )
                else:
                    messages.success(request, _("Stored %(name)s.") % {"name": package.name})
                return redirect("provisioning:packages")
            except ValidationError as error:
                for field, messages_ in error.message_dict.items():
                    form.add_error(field if field in form.fields else "file", messages_)
            except PermissionDenied as error:
                form.add_error("file", str(error))
                status = 403
    return render(
        request,
        "provisioning/packages.html",
        {
            "packages": PackageFile.objects.select_related("uploaded_by", "pending_uploaded_by"),
            "form": form,
            "can_upload": has_role(request.user, OPERATOR),
            "can_delete": has_role(request.user, ADMIN),
        },
        status=status,
    )


@role_required(ADMIN)
@require_POST
def delete_package(request, pk):
    package = get_object_or_404(PackageFile.objects.visible_to(request.user), pk=pk)
    store.delete_package(package, user=request.user)
    messages.success(request, _("Deleted %(name)s.") % {"name": package.name})
    return redirect("provisioning:packages")


@role_required(ADMIN)
@require_POST
def confirm_replacement(request, pk):
    """The admin checked the pending file's SHA-256 (against the vendor's) and puts it in use."""
    package = get_object_or_404(PackageFile.objects.visible_to(request.user), pk=pk)
    try:
        store.confirm_replacement(package, request.POST.get("sha256", ""), user=request.user)
        messages.success(request, _("%(name)s: the new file is in use.") % {"name": package.name})
    except ValidationError as error:
        _say_errors(request, error)
    return redirect("provisioning:packages")


@role_required(ADMIN)
@require_POST
def discard_replacement(request, pk):
    package = get_object_or_404(PackageFile.objects.visible_to(request.user), pk=pk)
    try:
        store.discard_replacement(package, user=request.user)
        messages.success(request, _("%(name)s: the new file was discarded.") % {"name": package.name})
    except ValidationError as error:
        _say_errors(request, error)
    return redirect("provisioning:packages")


@require_GET
def download(request, sha256, name):
    """Agents fetch store files here with their operation's download token (no session, no role)."""
    header = request.headers.get("Authorization", "")
    token = (
        header.removeprefix("Bearer ").strip()
        if header.startswith("Bearer ")
        else request.GET.get("token", "")
    )
    if not token or services.operation_for_token(token) is None:
        return HttpResponseForbidden(_("A valid download token of a running operation is required."))
    package = PackageFile.objects.filter(sha256=sha256, name=name).first()
    path = store.stored_path(package) if package else None
    if path is None or not path.is_file():
        raise Http404(_("No such file in the package store."))
    return FileResponse(path.open("rb"), as_attachment=True, filename=name)
