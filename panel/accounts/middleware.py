"""Page guards of accounts (a module of its own: panel.accounts.permissions, which DRF imports while
panel.core.web.middleware is still loading, must not import it)."""

from asgiref.sync import sync_to_async
from django.conf import settings
from django.shortcuts import redirect
from django.urls import reverse
from django.utils.http import urlencode

from panel.accounts.temporary import must_change_password
from panel.core.rest.exceptions import is_api
from panel.core.web.middleware import SyncAndAsyncMiddleware


class TemporaryPasswordMiddleware(SyncAndAsyncMiddleware):
    """After AuthenticationMiddleware: a page request of a user who must change their password goes to
    the page that changes it. /api/ is left to RolePermission (a JSON 403 rather than a redirect)."""

    def handle(self, request):
        return self.detour(request) or self.get_response(request)

    async def __acall__(self, request):
        return await sync_to_async(self.detour)(request) or await self.get_response(request)

    @staticmethod
    def detour(request):
        if is_api(request) or request.path.startswith((settings.STATIC_URL, "/i18n/")):
            return None
        allowed = (reverse("accounts:password-required"), reverse("accounts:logout"))
        if request.path in allowed or not must_change_password(request.user):
            return None
        return redirect(f"{allowed[0]}?{urlencode({'next': request.get_full_path()})}")
