"""The usage page (tokens over time per key and per model, top keys, errors) and its CSV export."""

import csv

from django.http import StreamingHttpResponse
from django.shortcuts import render
from django.utils import timezone
from django.utils.translation import gettext as _
from django.views.decorators.http import require_safe

from panel.accounts.roles import ADMIN, VIEWER, has_role
from panel.core.views import role_required
from panel.gateway.accounting import reports
from panel.gateway.links import gateway_url

CSV_COLUMNS = (
    "hour", "key", "model", "deployment", "requests", "errors", "prompt_tokens", "completion_tokens",
    "ttft_ms_avg", "duration_ms_avg",
)  # fmt: skip


@role_required(VIEWER)
@require_safe
def usage_page(request):
    """Admins see every key; everyone else the keys they own."""
    selection = reports.Selection.from_query(request.GET)
    hours = reports.hours(request.user, selection)
    context = {
        "selection": selection,
        "ranges": [(name, label) for name, (label, _span, _step) in reports.RANGES.items()],
        "totals": reports.totals(hours),
        "top_keys": reports.grouped(hours, "key", 20),
        "models": reports.grouped(hours, "model"),
        "errors": reports.recent_errors(request.user, selection),
        "error_counts": reports.error_counts(request.user, selection),
        "charts": {
            "step": int(selection.step.total_seconds()),
            "keys": reports.series(hours, "key", selection),
            "models": reports.series(hours, "model", selection),
        },
        "chart_labels": {"other": _("other"), "time": _("Time")},
        "all_keys": has_role(request.user, ADMIN),
        "gateway_url": gateway_url(request),
    }
    return render(request, "gateway/usage.html", context)


class _Echo:
    def write(self, value):
        return value


@role_required(VIEWER)
@require_safe
def usage_csv(request):
    """The hourly sums of the page's selection, one line per hour, key, model and deployment."""
    selection = reports.Selection.from_query(request.GET)
    rows = reports.hours(request.user, selection).order_by("hour", "key", "model", "deployment_name")
    writer = csv.writer(_Echo())

    def lines():
        yield writer.writerow(CSV_COLUMNS)
        for row in rows.iterator(chunk_size=2000):
            yield writer.writerow(
                [
                    row.hour.isoformat(),
                    row.key,
                    row.model,
                    row.deployment_name,
                    row.requests,
                    row.errors,
                    row.prompt_tokens,
                    row.completion_tokens,
                    round(row.ttft_ms_sum / row.ttft_count, 1) if row.ttft_count else "",
                    round(row.duration_ms_sum / row.requests, 1) if row.requests else "",
                ]
            )

    stamp = timezone.now().strftime("%Y%m%d-%H%M")
    response = StreamingHttpResponse(lines(), content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="usage-{selection.range}-{stamp}.csv"'
    return response
