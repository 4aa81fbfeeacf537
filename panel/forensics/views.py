from django.contrib import messages
from django.core.exceptions import ValidationError
from django.http import FileResponse, Http404, HttpResponseForbidden, JsonResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils.translation import gettext as _
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST, require_safe

from panel.accounts.roles import OPERATOR, VIEWER, has_role
from panel.core.views import role_required
from panel.deployments.models import Deployment
from panel.forensics import services
from panel.forensics.models import DiagnosticsBundle


@csrf_exempt
@require_POST
def upload(request):
    """Agents send their part of a bundle here with their operation's upload token (no session, no role)."""
    header = request.headers.get("Authorization", "")
    token = header.removeprefix("Bearer ").strip() if header.startswith("Bearer ") else ""
    operation = services.operation_for_upload(token) if token else None
    if operation is None:
        return HttpResponseForbidden(_("A valid upload token of a running collection is required."))
    try:
        size = services.store_upload(operation, request)
    except ValidationError as error:
        return JsonResponse({"detail": " ".join(error.messages)}, status=400)
    return JsonResponse({"received": size}, status=201)


@role_required(OPERATOR)
@require_POST
def collect(request, name):
    deployment = get_object_or_404(Deployment.objects.visible_to(request.user), name=name)
    try:
        services.collect(deployment, user=request.user, panel_url=request.build_absolute_uri("/"))
    except ValidationError as error:
        messages.error(request, " ".join(error.messages))
    else:
        messages.info(request, _("Collecting diagnostics from every node of %(name)s.") % {"name": name})
    return redirect("deployments:detail", name=name)


@role_required(VIEWER)
@require_safe
def download(request, pk):
    bundle = get_object_or_404(DiagnosticsBundle.objects.visible_to(request.user), pk=pk)
    path = services.archive_path(bundle)
    if path is None:
        raise Http404(_("This bundle has no archive (yet)."))
    return FileResponse(path.open("rb"), as_attachment=True, filename=bundle.file_name)


@role_required(VIEWER)
@require_safe
def deployment_bundles(request, name):
    """The deployment page's diagnostics box alone: static/js/diagnostics_box.js swaps it in when told."""
    deployment = get_object_or_404(Deployment.objects.visible_to(request.user), name=name)
    context = {"deployment": deployment, "can_operate": has_role(request.user, OPERATOR)}
    return render(request, "forensics/deployment_bundles.html", context)
