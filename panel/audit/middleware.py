"""Remembers the request being served, so record() called from a service knows who and from where."""

from panel.audit.services import current_request
from panel.core.web.middleware import SyncAndAsyncMiddleware


class AuditRequestMiddleware(SyncAndAsyncMiddleware):
    def handle(self, request):
        token = current_request.set(request)
        try:
            return self.get_response(request)
        finally:
            current_request.reset(token)

    async def __acall__(self, request):
        # A context variable: the view's sync code (run by sync_to_async) sees it in a copy of this context.
        token = current_request.set(request)
        try:
            return await self.get_response(request)
        finally:
            current_request.reset(token)
