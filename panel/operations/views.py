from django.core.paginator import Paginator
from django.shortcuts import get_object_or_404, render
from django.views.decorators.http import require_safe

from panel.accounts.roles import VIEWER
from panel.core.choices import OperationStatus
from panel.core.views import role_required
from panel.operations.filtersets import OperationFilterSet
from panel.operations.models import Operation


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
    labels = {value: str(label) for value, label in OperationStatus.choices}
    return render(request, "operations/detail.html", {"operation": operation, "status_labels": labels})
