"""Pages where admins manage the panel's users: list, create, change role, deactivate, reset password."""

from django.contrib import messages
from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.shortcuts import get_object_or_404, redirect, render
from django.utils.translation import gettext as _
from django.views.decorators.http import require_http_methods, require_POST

from panel.accounts import users
from panel.accounts.roles import ADMIN
from panel.core.domain.names import USERNAME
from panel.core.views import role_required

# A new or reset password is shown once, on the page the admin lands on after the POST.
HANDOVER = "user_handover"


def _say(request, error: ValidationError) -> None:
    for message in error.messages:
        messages.error(request, message)


@role_required(ADMIN)
@require_http_methods(["GET", "HEAD", "POST"])
def user_list(request):
    if request.method == "POST":
        try:
            user, password = users.create_user(
                username=request.POST.get("username", ""),
                role=request.POST.get("role", ""),
                email=request.POST.get("email", ""),
            )
        except ValidationError as error:
            _say(request, error)
        else:
            request.session[HANDOVER] = {"username": user.get_username(), "password": password}
        return redirect("accounts:users")
    return render(
        request,
        "accounts/users.html",
        {
            "rows": users.users_with_roles(),
            "roles": users.ROLE_LABELS.items(),
            "handover": request.session.pop(HANDOVER, None),
            "username_help": USERNAME.help_text,
        },
    )


def _user(pk):
    return get_object_or_404(get_user_model(), pk=pk)


@role_required(ADMIN)
@require_POST
def change_role(request, pk):
    user = _user(pk)
    try:
        users.change_role(user, request.POST.get("role", ""))
    except ValidationError as error:
        _say(request, error)
    else:
        messages.success(
            request,
            _("%(user)s is now %(role)s.")
            % {"user": user.get_username(), "role": users.ROLE_LABELS[request.POST["role"]]},
        )
    return redirect("accounts:users")


@role_required(ADMIN)
@require_POST
def set_active(request, pk):
    user = _user(pk)
    active = request.POST.get("active") == "1"
    try:
        users.set_active(user, active, by=request.user)
    except ValidationError as error:
        _say(request, error)
    else:
        text = _("%(user)s can sign in again.") if active else _("%(user)s is deactivated.")
        messages.success(request, text % {"user": user.get_username()})
    return redirect("accounts:users")


@role_required(ADMIN)
@require_POST
def reset_password(request, pk):
    user = _user(pk)
    request.session[HANDOVER] = {"username": user.get_username(), "password": users.reset_password(user)}
    return redirect("accounts:users")
