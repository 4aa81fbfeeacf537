from django.utils.translation import gettext_lazy as _
from rest_framework import permissions

from panel.accounts.models import SCOPE_DEPLOY, ApiToken
from panel.accounts.roles import OPERATOR, VIEWER, has_role
from panel.accounts.temporary import PASSWORD_CHANGE_FIRST, must_change_password


def token_allows(request, scope: str) -> bool:
    """A request signed in with an API token needs a token that covers `scope`; sessions need nothing more."""
    token = request.auth if isinstance(getattr(request, "auth", None), ApiToken) else None
    return token is None or token.covers(scope)


class RolePermission(permissions.BasePermission):
    """Reading needs any role; writing needs the view's `write_role` (operator unless it says otherwise). An
    API token must also cover the view's `token_scope` (deploy unless it says otherwise): an inference key
    reaches the gateway only, a deploy key everything but tokens."""

    def has_permission(self, request, view):
        if not request.user or not request.user.is_authenticated:
            # DRF throttles after the permission check, so an anonymous flood (token guessing) would only
            # ever see 401. Throttle it first: past the anonymous rate it gets 429. Refused requests never
            # reach DRF's own throttle check, so nothing is counted twice.
            view.check_throttles(request)
            return False
        if must_change_password(request.user):
            self.message = PASSWORD_CHANGE_FIRST
            return False
        needed = getattr(view, "token_scope", SCOPE_DEPLOY)
        if not token_allows(request, needed):
            self.message = _("This API token's scopes do not reach this endpoint (it needs {scope}).").format(
                scope=needed
            )
            return False
        if request.method in permissions.SAFE_METHODS:
            return has_role(request.user, getattr(view, "read_role", VIEWER))
        return has_role(request.user, getattr(view, "write_role", OPERATOR))
