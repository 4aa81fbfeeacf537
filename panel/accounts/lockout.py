"""What a locked-out sign-in gets (django-axes' AXES_LOCKOUT_CALLABLE, also for the per-account limit of
panel.accounts.signin_limits): the sign-in page with the reason, or JSON for the API; status 429 either
way."""

from axes.helpers import get_cool_off
from django.contrib.auth.forms import AuthenticationForm
from django.http import JsonResponse
from django.shortcuts import render
from django.utils.translation import gettext as _
from django.utils.translation import ngettext

from panel.accounts.signin_limits import ACCOUNT_SCOPE


def lockout_message(request) -> str:
    cool_off = get_cool_off(request)
    minutes = max(1, round(cool_off.total_seconds() / 60)) if cool_off else 0
    if getattr(request, "panel_lockout_scope", "") == ACCOUNT_SCOPE:
        return _(
            "Too many failed sign-ins for this user from several addresses. Try again later, or ask an "
            "admin to unlock it."
        )
    if not minutes:
        return _("Too many failed sign-ins for this user from your address. Ask an admin to unlock it.")
    return ngettext(
        "Too many failed sign-ins for this user from your address. Try again in %(minutes)d minute, "
        "or ask an admin to unlock it.",
        "Too many failed sign-ins for this user from your address. Try again in %(minutes)d minutes, "
        "or ask an admin to unlock it.",
        minutes,
    ) % {"minutes": minutes}


def lockout_response(request, original_response=None, credentials=None):
    message = lockout_message(request)
    if request.path.startswith("/api/"):
        return JsonResponse({"detail": message}, status=429)
    form = AuthenticationForm(request, initial={"username": (credentials or {}).get("username", "")})
    return render(
        request,
        "accounts/login.html",
        {"form": form, "lockout_message": message, "next": request.GET.get("next", "")},
        status=429,
    )
