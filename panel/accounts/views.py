from datetime import timedelta

from django.contrib import messages
from django.contrib.auth import update_session_auth_hash
from django.contrib.auth import views as auth_views
from django.contrib.auth.forms import PasswordChangeForm
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.utils.translation import gettext as _
from django.views.decorators.http import require_POST, require_safe

from panel.accounts import services
from panel.accounts.models import ApiToken
from panel.accounts.roles import VIEWER
from panel.core.views import role_required

TOKEN_LIFETIMES = {"": None, "30": 30, "90": 90, "365": 365}


class LoginView(auth_views.LoginView):
    template_name = "accounts/login.html"
    redirect_authenticated_user = True


class LogoutView(auth_views.LogoutView):
    pass


@role_required(VIEWER)
@require_safe
def settings_page(request):
    """The user's settings: language, theme and API tokens."""
    return _settings(request, PasswordChangeForm(request.user))


def _settings(request, password_form):
    new_token = request.session.pop("new_token", None)
    tokens = ApiToken.objects.filter(user=request.user)
    context = {
        "tokens": tokens,
        "new_token": new_token,
        "lifetimes": TOKEN_LIFETIMES,
        "password_form": password_form,
    }
    return render(request, "accounts/settings.html", context)


@role_required(VIEWER)
@require_POST
def change_password(request):
    """Change one's own password (a temporary one from an admin, say); the session stays signed in."""
    form = PasswordChangeForm(request.user, request.POST)
    if not form.is_valid():
        return _settings(request, form)
    update_session_auth_hash(request, form.save())
    messages.success(request, _("Your password is changed."))
    return redirect("accounts:settings")


@role_required(VIEWER)
@require_POST
def create_token(request):
    name = request.POST.get("name", "").strip()
    days = TOKEN_LIFETIMES.get(request.POST.get("lifetime", ""))
    if not name or len(name) > 100:
        messages.error(request, _("Give the token a name of at most 100 characters."))
    elif ApiToken.objects.filter(user=request.user, name=name).exists():
        messages.error(request, _("You already have a token named “%(name)s”.") % {"name": name})
    else:
        expires = timezone.now() + timedelta(days=days) if days else None
        _token, raw = services.issue_token(request.user, name, expires)
        request.session["new_token"] = raw
    return redirect("accounts:settings")


@role_required(VIEWER)
@require_POST
def revoke_token(request, pk):
    token = get_object_or_404(ApiToken, pk=pk, user=request.user)
    if services.revoke_token(token):
        messages.success(request, _("Token “%(name)s” revoked.") % {"name": token.name})
    return redirect("accounts:settings")
