"""First-run set-up: the role groups with their permissions, and the `admin` user."""

import secrets

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group, Permission

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


def ensure_admin(password: str = "") -> str | None:
    """Create the `admin` user on first run. Returns the password when one was generated (print it once)."""
    users = get_user_model()
    if users.objects.filter(username="admin").exists():
        return None
    generated = not password
    password = password or secrets.token_urlsafe(12)
    user = users.objects.create_superuser("admin", email="", password=password)
    user.groups.add(Group.objects.get_or_create(name=ADMIN)[0])
    return password if generated else None
