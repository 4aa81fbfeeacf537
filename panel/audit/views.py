from django.conf import settings
from django.core.paginator import Paginator
from django.shortcuts import render
from django.views.decorators.http import require_safe

from panel.accounts.roles import ADMIN
from panel.audit.filtersets import AuditEntryFilterSet
from panel.audit.models import AuditEntry
from panel.core.views import role_required


@role_required(ADMIN)
@require_safe
def audit_list(request):
    """Who did what, when and from where; newest first, filtered like the API."""
    queryset = AuditEntry.objects.visible_to(request.user).select_related("actor")
    filterset = AuditEntryFilterSet(request.GET, queryset=queryset)
    page = Paginator(filterset.qs, 100).get_page(request.GET.get("page"))
    query = request.GET.copy()
    query.pop("page", None)
    return render(
        request,
        "audit/audit_list.html",
        {
            "page": page,
            "filterset": filterset,
            "query": query.urlencode(),
            "retention_days": settings.PANEL_AUDIT_RETENTION_DAYS,
        },
    )
