"""Every API error body has `detail` (a sentence) and, for validation errors, `errors` keyed by field."""

from django.http import JsonResponse
from django.utils.translation import gettext as _
from django.views.defaults import page_not_found
from django.views.defaults import server_error as django_server_error
from rest_framework.views import exception_handler as drf_exception_handler


def exception_handler(exc, context):
    """Every error body has `detail` (a sentence) and, for validation errors, `errors` keyed by field."""
    response = drf_exception_handler(exc, context)
    if response is None:
        return None
    data = response.data
    if isinstance(data, dict) and set(data) != {"detail"}:
        fields = {k: v for k, v in data.items() if k != "detail"}
        first = next(iter(fields.items()), None)
        summary = (
            f"{first[0]}: {first[1][0] if isinstance(first[1], list) and first[1] else first[1]}"
            if first
            else ""
        )
        response.data = {"detail": data.get("detail", summary), "errors": fields}
    elif isinstance(data, list):
        response.data = {"detail": str(data[0]) if data else "", "errors": {"non_field_errors": data}}
    return response


def not_found(request, exception):
    """Django's 404 handler: API clients get the error shape in JSON (for a URL no route matches, e.g. a
    non-numeric id), pages get the usual HTML page."""
    if request.path.startswith("/api/"):
        return JsonResponse(
            {"detail": _("No API endpoint or object at {path}.").format(path=request.path)}, status=404
        )
    return page_not_found(request, exception)


def server_error(request):
    """Django's 500 handler: API clients get the error shape in JSON rather than an HTML page."""
    if request.path.startswith("/api/"):
        return JsonResponse(
            {"detail": _("The panel failed on this request; its log has the details.")}, status=500
        )
    return django_server_error(request)
