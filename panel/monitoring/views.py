import hmac
import ipaddress

from django.conf import settings
from django.contrib import messages
from django.core.paginator import Paginator
from django.http import HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils.http import url_has_allowed_host_and_scheme
from django.utils.translation import gettext as _
from django.views.decorators.http import require_GET, require_POST, require_safe
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest

from panel.accounts.roles import OPERATOR, VIEWER
from panel.core.views import role_required
from panel.monitoring.alerting import alerts
from panel.monitoring.filtersets import AlertFilterSet
from panel.monitoring.metrics.prometheus import registry
from panel.monitoring.models import Alert


def scrape_allowed(request) -> tuple[bool, int]:
    """(allowed, status to refuse with). A matching bearer token or an allow-listed address may scrape."""
    token = settings.PANEL_METRICS_TOKEN
    header = request.headers.get("Authorization", "").split()
    if token and len(header) == 2 and header[0].lower() == "bearer":
        return hmac.compare_digest(header[1].encode(), token.encode()), 401
    if _address_allowed(request.META.get("REMOTE_ADDR", "")):
        return True, 0
    return False, 401 if token else 403


def _address_allowed(address: str) -> bool:
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return False
    for entry in settings.PANEL_METRICS_ALLOW:
        try:
            if ip in ipaddress.ip_network(entry.strip(), strict=False):
                return True
        except ValueError:
            continue
    return False


@require_GET
def prometheus_metrics(request):
    """Prometheus exposition of the fleet (npu-exporter names) and of the panel itself."""
    allowed, refusal = scrape_allowed(request)
    if not allowed:
        response = HttpResponse(
            "Scrape refused: send Authorization: Bearer <PANEL_METRICS_TOKEN>, or scrape from an address in "
            "PANEL_METRICS_ALLOW.\n",
            status=refusal,
            content_type="text/plain",
        )
        if refusal == 401:
            response["WWW-Authenticate"] = "Bearer"
        return response
    return HttpResponse(generate_latest(registry()), content_type=CONTENT_TYPE_LATEST)


@role_required(VIEWER)
@require_safe
def alert_list(request):
    queryset = Alert.objects.visible_to(request.user).select_related("node", "acknowledged_by")
    data = request.GET.copy()
    data.setdefault("open", "true")
    filterset = AlertFilterSet(data, queryset=queryset)
    page = Paginator(filterset.qs, 50).get_page(request.GET.get("page"))
    return render(request, "monitoring/alert_list.html", {"page": page, "filterset": filterset})


@require_POST
@role_required(OPERATOR)
def acknowledge_alert(request, pk):
    alert = get_object_or_404(Alert.objects.visible_to(request.user).select_related("node"), pk=pk)
    alerts.acknowledge(alert, request.user)
    messages.success(request, _("Alert acknowledged."))
    # `next` comes from the form: only a page of this panel, never another site (an open redirect).
    next_url = request.POST.get("next", "")
    if not url_has_allowed_host_and_scheme(next_url, {request.get_host()}, request.is_secure()):
        next_url = "monitoring:alerts"
    return redirect(next_url)
