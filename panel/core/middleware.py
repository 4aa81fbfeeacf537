"""Request guards that belong at the edge, before any view runs, and the static files.

Every middleware of the panel runs async under daphne as well as sync: a single sync-only one makes Django
run the rest of the request, views included, beneath a thread that it blocks until the response is done,
so a `?wait=` or `?watch=true` (panel/core/streams.py) would hold that thread for its whole wait.
"""

from asgiref.sync import iscoroutinefunction, markcoroutinefunction, sync_to_async
from django.conf import settings
from django.http import HttpResponseBadRequest, JsonResponse
from django.utils.translation import gettext as _
from whitenoise.middleware import WhiteNoiseMiddleware


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
