"""First-run set-up: the role groups with their permissions, and the `admin` user."""

import secrets

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group, Permission
from django.contrib.auth.password_validation import validate_password
from django.core.exceptions import ValidationError
from django.utils.translation import gettext as _

from panel.accounts.roles import ADMIN, OPERATOR, OPERATOR_WRITES, VIEWER

PANEL_APPS = ("accounts", "nodes", "catalog", "deployments", "operations")


def ensure_role_groups() -> None:
    panel_perms = Permission.objects.filter(content_type__app_label__in=PANEL_APPS)
    view = [p for p in panel_perms if p.codename.startswith("view_")]
    operator = view + [
        p
        for p in panel_perms
        if p.codename.split("_", 1)[0] in OPERATOR_WRITES.get(p.content_type.app_label, ())
    ]
    for name, perms in ((VIEWER, view), (OPERATOR, operator), (ADMIN, list(panel_perms))):
        group, _ = Group.objects.get_or_create(name=name)
        group.permissions.set(perms)


class WeakAdminPassword(ValueError):
    """PANEL_ADMIN_PASSWORD fails the password validators; the message names the variable and the reasons."""


def check_admin_password(password: str, user=None) -> None:
    """PANEL_ADMIN_PASSWORD goes through the same validators (AUTH_PASSWORD_VALIDATORS) as any password."""
    try:
        validate_password(password, user=user)
    except ValidationError as error:
        raise WeakAdminPassword(
            _(
                "PANEL_ADMIN_PASSWORD is not accepted: %(reasons)s Set a stronger one, or leave it empty to "
                "have a random password generated and printed once."
            )
            % {"reasons": " ".join(error.messages)}
        ) from None


def ensure_admin(password: str = "") -> str | None:
    """Create the `admin` user on first run. Returns the password when one was generated (print it once).
    Raises WeakAdminPassword when the given password fails the validators (nothing is created)."""
    users = get_user_model()
    if users.objects.filter(username="admin").exists():
        return None
    if password:
        check_admin_password(password, user=users(username="admin"))
    generated = not password
    password = password or secrets.token_urlsafe(12)
    user = users.objects.create_superuser("admin", email="", password=password)
    user.groups.add(Group.objects.get_or_create(name=ADMIN)[0])
    return password if generated else None
