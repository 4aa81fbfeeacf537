"""Request guards that belong at the edge, before any view runs."""

from django.http import HttpResponseBadRequest, JsonResponse
from django.utils.translation import gettext as _


class RejectNulInQueryMiddleware:
    """A NUL character in a query parameter is never meaningful, and PostgreSQL refuses it in any string
    (a 500 deep inside a filter). Forms and serializers already refuse it in bodies."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        if any("\x00" in key or "\x00" in value for key, values in request.GET.lists() for value in values):
            message = _("Query parameters must not contain NUL characters.")
            if request.path.startswith("/api/"):
                return JsonResponse({"detail": message, "errors": {}}, status=400)
            return HttpResponseBadRequest(message)
        return self.get_response(request)
