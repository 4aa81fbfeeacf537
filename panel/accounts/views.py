from datetime import timedelta

from django.contrib import messages
from django.contrib.auth import update_session_auth_hash
from django.contrib.auth import views as auth_views
from django.contrib.auth.forms import PasswordChangeForm
from django.contrib.auth.views import redirect_to_login
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils import timezone
from django.utils.translation import gettext as _
from django.views.decorators.http import require_http_methods, require_POST, require_safe

from panel.accounts import services
from panel.accounts.forms import ApiTokenForm
from panel.accounts.models import SCOPE_INFERENCE, ApiToken
from panel.accounts.roles import VIEWER
from panel.accounts.temporary import must_change_password, password_changed, safe_next
from panel.core.views import role_required


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


def _settings(request, password_form, token_form=None):
    new_token = request.session.pop("new_token", None)
    tokens = ApiToken.objects.filter(user=request.user)
    context = {
        "tokens": tokens,
        "new_token": new_token,
        "token_form": token_form or ApiTokenForm(user=request.user, initial={"scopes": [SCOPE_INFERENCE]}),
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
    password_changed(request.user)
    messages.success(request, _("Your password is changed."))
    return redirect("accounts:settings")


@require_http_methods(["GET", "HEAD", "POST"])
def password_required(request):
    """The one page a user with a temporary password reaches: change it, then go where they were going."""
    if not request.user.is_authenticated:
        return redirect_to_login(request.get_full_path())
    if not must_change_password(request.user):
        return redirect(safe_next(request))
    form = PasswordChangeForm(request.user, request.POST or None)
    if request.method == "POST" and form.is_valid():
        update_session_auth_hash(request, form.save())
        password_changed(request.user)
        messages.success(request, _("Your password is changed."))
        return redirect(safe_next(request))
    return render(request, "accounts/password_required.html", {"form": form, "next": safe_next(request)})


@role_required(VIEWER)
@require_POST
def create_token(request):
    form = ApiTokenForm(request.POST, user=request.user)
    if not form.is_valid():
        return _settings(request, PasswordChangeForm(request.user), form)
    days = form.cleaned_data["lifetime"]
    expires = timezone.now() + timedelta(days=int(days)) if days else None
    _token, raw = services.issue_token(request.user, form.cleaned_data["name"], expires, form.grant())
    request.session["new_token"] = raw
    return redirect(reverse("accounts:settings") + "#tokens")


@role_required(VIEWER)
@require_POST
def revoke_token(request, pk):
    token = get_object_or_404(ApiToken, pk=pk, user=request.user)
    if services.revoke_token(token):
        messages.success(request, _("Token “%(name)s” revoked.") % {"name": token.name})
    return redirect(reverse("accounts:settings") + "#tokens")
