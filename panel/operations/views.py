from django.contrib import messages
from django.core.paginator import Paginator
from django.shortcuts import get_object_or_404, redirect, render
from django.utils.translation import gettext as _
from django.views.decorators.http import require_POST, require_safe

from panel.accounts.roles import ADMIN, VIEWER, has_role
from panel.core.views import role_required
from panel.operations.filtersets import OperationFilterSet
from panel.operations.models import Operation
from panel.operations.reaper import force_fail


@role_required(VIEWER)
@require_safe
def operation_list(request):
    queryset = Operation.objects.visible_to(request.user).select_related("node", "created_by")
    filterset = OperationFilterSet(request.GET, queryset=queryset)
    page = Paginator(filterset.qs, 50).get_page(request.GET.get("page"))
    return render(request, "operations/list.html", {"page": page, "filterset": filterset})


@role_required(VIEWER)
@require_safe
def operation_detail(request, pk):
    operation = get_object_or_404(Operation.objects.visible_to(request.user).select_related("node"), pk=pk)
    context = {
        "operation": operation,
        "can_force_fail": has_role(request.user, ADMIN),
    }
    return render(request, "operations/detail.html", context)


@role_required(ADMIN)
@require_POST
def operation_force_fail(request, pk):
    operation = get_object_or_404(Operation.objects.visible_to(request.user), pk=pk)
    if force_fail(operation, request.user, request.POST.get("reason", "").strip()[:200]):
        messages.warning(request, _("The operation was force-failed."))
    else:
        messages.info(request, _("The operation had already ended."))
    return redirect("operations:detail", pk=operation.pk)
