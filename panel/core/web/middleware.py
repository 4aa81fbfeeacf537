"""Request guards that belong at the edge, before any view runs, and the static files.

Every middleware of the panel runs async under the ASGI server as well as sync: a single sync-only one makes
Django run the rest of the request, views included, beneath a thread that it blocks until the response is
done, so a `?wait=` or `?watch=true` (panel/core/rest/streams.py) would hold that thread for its whole wait.
"""

from asgiref.sync import iscoroutinefunction, markcoroutinefunction, sync_to_async
from django.conf import settings
from django.core.exceptions import RequestDataTooBig, TooManyFieldsSent
from django.db import IntegrityError
from django.http import Http404, HttpResponseBadRequest, JsonResponse
from django.shortcuts import render
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy
from django.views.defaults import page_not_found
from whitenoise.middleware import WhiteNoiseMiddleware

from panel.core.rest.exceptions import conflict_text, is_api, not_found_text, unique_violation

# The sentence for an error answer that reached the edge without one (Django's own pages), by status.
GENERIC_DETAILS = {
    400: gettext_lazy("The request is malformed."),
    403: gettext_lazy("Your role may not do this."),
    405: gettext_lazy("This endpoint does not take this method."),
    500: gettext_lazy("The panel failed on this request; its log has the details."),
}


class SyncAndAsyncMiddleware:
    """Django's pattern for a middleware that is both: async when the handler below it is."""

    sync_capable = True
    async_capable = True

    def __init__(self, get_response):
        self.get_response = get_response
        if iscoroutinefunction(get_response):
            markcoroutinefunction(self)

    def __call__(self, request):
        if iscoroutinefunction(self):
            return self.__acall__(request)
        return self.handle(request)

    def handle(self, request):
        raise NotImplementedError

    async def __acall__(self, request):
        raise NotImplementedError


class RejectNulInQueryMiddleware(SyncAndAsyncMiddleware):
    """A NUL character in a query parameter is never meaningful, and PostgreSQL refuses it in any string
    (a 500 deep inside a filter). Forms and serializers already refuse it in bodies."""

    def handle(self, request):
        return self.refusal(request) or self.get_response(request)

    async def __acall__(self, request):
        return self.refusal(request) or await self.get_response(request)

    @staticmethod
    def refusal(request):
        if any("\x00" in key or "\x00" in value for key, values in request.GET.lists() for value in values):
            message = _("Query parameters must not contain NUL characters.")
            if request.path.startswith("/api/"):
                return JsonResponse({"detail": message, "errors": {}}, status=400)
            return HttpResponseBadRequest(message)
        return None


class ApiErrorsMiddleware(SyncAndAsyncMiddleware):
    """Under /api/ every error answer is JSON in the one shape, whatever produced it: a body over the size
    limit (413, refused before anything reads it), Django's technical pages with DEBUG on, its plain
    400/403/500 pages. DRF views already answer in the shape (panel.core.rest.exceptions)."""

    def handle(self, request):
        if not is_api(request):
            return self.get_response(request)
        if _declared_length(request) > _limit(request):
            return too_large(request)
        return as_json_error(request, self.get_response(request))

    async def __acall__(self, request):
        if not is_api(request):
            return await self.get_response(request)
        if _declared_length(request) > _limit(request):
            return too_large(request)
        return as_json_error(request, await self.get_response(request))

    def process_exception(self, request, exception):
        # A body without a Content-Length (chunked) is only measured while a view reads it.
        if is_api(request) and isinstance(exception, RequestDataTooBig):
            return too_large(request)
        if is_api(request) and isinstance(exception, TooManyFieldsSent):
            return JsonResponse({"detail": str(exception)}, status=400)
        return None


def _declared_length(request) -> int:
    try:
        return int(request.META.get("CONTENT_LENGTH") or 0)
    except ValueError:
        return 0


def _limit(request) -> int:
    """File uploads (the package store) may be large; any other body is a few KB of JSON or YAML."""
    if request.META.get("CONTENT_TYPE", "").startswith("multipart/form-data"):
        return settings.PANEL_MAX_UPLOAD_BYTES
    return settings.DATA_UPLOAD_MAX_MEMORY_SIZE


def too_large(request):
    return JsonResponse({"detail": too_large_text(_limit(request))}, status=413)


def too_large_text(limit: int) -> str:
    """The 413 sentence, the API's and the /v1 gateway's: "… larger than the 2.5 MB the panel takes."."""
    size = format(round(limit / 1024 / 1024, 1), "g")
    return _("The request body is larger than the {size} MB the panel takes.").format(size=size)


def as_json_error(request, response):
    """`response` unchanged unless it is an error that is not JSON: then the same status in the shape."""
    if response.status_code < 400 or response.streaming:
        return response
    content_type = response.get("Content-Type", "")
    if content_type.startswith("application/json") or content_type.startswith("application/problem+json"):
        return response
    if response.status_code == 404:
        detail = not_found_text(request)
    elif content_type.startswith("text/plain") and 0 < len(response.content) <= 500:
        detail = response.content.decode(errors="replace").strip()  # a sentence someone wrote: keep it
    else:
        detail = str(GENERIC_DETAILS.get(response.status_code) or _("The request failed."))
    answer = JsonResponse({"detail": detail}, status=response.status_code)
    for header in ("Allow", "Retry-After", "WWW-Authenticate"):
        if header in response:
            answer[header] = response[header]
    return answer


class StaticFilesMiddleware(WhiteNoiseMiddleware):
    """WhiteNoise, which is sync only (6.x), able to run async as well: a static file is looked up and
    opened on the request's thread, every other request passes straight through."""

    sync_capable = True
    async_capable = True

    def __init__(self, get_response=None, settings=settings):
        super().__init__(get_response, settings)
        if iscoroutinefunction(get_response):
            markcoroutinefunction(self)

    def __call__(self, request):
        if iscoroutinefunction(self):
            return self.__acall__(request)
        return super().__call__(request)

    async def __acall__(self, request):
        path = request.path_info
        if self.autorefresh:
            # Found on disk at each request (DEBUG); only under the static prefix, as the panel sets no
            # WHITENOISE_ROOT.
            found = await sync_to_async(self.find_file)(path) if path.startswith(self.static_prefix) else None
        else:
            found = self.files.get(path)  # collected at start-up: a dictionary lookup
        if found is not None:
            return await sync_to_async(self.serve)(found, request)
        return await self.get_response(request)


class NotFoundPageMiddleware(SyncAndAsyncMiddleware):
    """With DEBUG on (`make run`), Django answers a page that is not there with its technical 404 page
    instead of the panel's handler404: show the panel's own page (templates/404.html) then too. /api/ keeps
    its JSON answer (ApiErrorsMiddleware)."""

    def handle(self, request):
        return self.panel_page(request, self.get_response(request))

    async def __acall__(self, request):
        response = await self.get_response(request)
        return await sync_to_async(self.panel_page)(request, response)

    @staticmethod
    def panel_page(request, response):
        if not settings.DEBUG or response.status_code != 404 or is_api(request):
            return response
        if not response.get("Content-Type", "").startswith("text/html"):
            return response
        return page_not_found(request, Http404())


class ConflictPageMiddleware(SyncAndAsyncMiddleware):
    """A page form that passed its own "is the name free" check and then lost the insert to another request
    (two admins, or a page and a pipeline, at once) answers 409 with what happened, as the API does
    (panel.core.rest.exceptions), never a 500. Any other integrity error stays the panel's own bug."""

    def handle(self, request):
        return self.get_response(request)

    async def __acall__(self, request):
        return await self.get_response(request)

    def process_exception(self, request, exception):
        if is_api(request) or not isinstance(exception, IntegrityError):
            return None
        columns = unique_violation(exception)
        if columns is None:
            return None
        return render(request, "409.html", {"detail": conflict_text(columns)}, status=409)
