"""A temporary password (a new user's, or one an admin reset) must be changed before anything else.

Pages: panel.accounts.middleware.TemporaryPasswordMiddleware sends every page request of such a user to
the page that changes it (signing out, switching the language and static files still work). API:
RolePermission answers 403 with PASSWORD_CHANGE_FIRST, and the token sign-in issues no token to such a
user. The mark is a TemporaryPassword row: set with the password, removed by the change.
"""

from django.urls import reverse
from django.utils.http import url_has_allowed_host_and_scheme
from django.utils.translation import gettext_lazy as _

from panel.accounts.models import TemporaryPassword

PASSWORD_CHANGE_FIRST = _(
    "Your password is a temporary one from an admin: sign in to the panel in a browser and change it first "
    "(you are taken to that page)."
)


def must_change_password(user) -> bool:
    # The reverse one-to-one caches its answer on the user, found or not: one query per request at most,
    # none for an API token (its authentication selects it with the user).
    return bool(user and user.is_authenticated and hasattr(user, "temporary_password"))


def mark_temporary(user) -> None:
    TemporaryPassword.objects.update_or_create(user=user)


def password_changed(user) -> None:
    TemporaryPassword.objects.filter(user=user).delete()
    user._state.fields_cache.pop("temporary_password", None)


def safe_next(request) -> str:
    target = request.POST.get("next") or request.GET.get("next") or ""
    if url_has_allowed_host_and_scheme(target, {request.get_host()}, require_https=request.is_secure()):
        return target
    return reverse("core:dashboard")
