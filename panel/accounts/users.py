"""Use-cases for the panel's users, for admins: create with a role, change the role, deactivate and
reactivate, reset the password (a new or reset one is temporary: panel.accounts.temporary). Roles are the
groups of panel.accounts.roles; the panel never leaves itself without an active admin."""

import secrets

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from panel.accounts.bootstrap import ensure_role_groups
from panel.accounts.roles import ADMIN, OPERATOR, ROLES, VIEWER, role_of
from panel.accounts.temporary import mark_temporary
from panel.core.domain.names import USERNAME

TEMPORARY_PASSWORD_BYTES = 12
ROLE_LABELS = {
    ADMIN: gettext_lazy("Admin"),
    OPERATOR: gettext_lazy("Operator"),
    VIEWER: gettext_lazy("Viewer"),
}


def temporary_password() -> str:
    return secrets.token_urlsafe(TEMPORARY_PASSWORD_BYTES)


def _check_role(role: str) -> None:
    if role not in ROLES:
        choices = ", ".join(str(label) for label in ROLE_LABELS.values())
        raise ValidationError({"role": [_("Choose one of: %(roles)s.") % {"roles": choices}]})


def _set_role(user, role: str) -> None:
    ensure_role_groups()
    user.groups.remove(*Group.objects.filter(name__in=ROLES))
    user.groups.add(Group.objects.get(name=role))
    user._panel_role = None


def _other_active_admins(user) -> bool:
    others = get_user_model().objects.filter(is_active=True).exclude(pk=user.pk)
    return others.filter(is_superuser=True).exists() or others.filter(groups__name=ADMIN).exists()


def _refuse_last_admin(user, action: str) -> None:
    if role_of(user) == ADMIN and not _other_active_admins(user):
        raise ValidationError(
            _("%(user)s is the only active admin; make another user admin before you %(action)s them.")
            % {"user": user.get_username(), "action": action}
        )


def create_user(*, username: str, role: str, email: str = "") -> tuple[object, str]:
    """A new active user with `role` and a temporary password, returned once to hand over."""
    _check_role(role)
    User = get_user_model()
    username = username.strip()
    if not username:
        raise ValidationError({"username": [_("Give a user name.")]})
    if (problem := USERNAME.problem(username)) is not None:
        raise ValidationError({"username": [problem]})
    if User.objects.filter(username__iexact=username).exists():
        raise ValidationError({"username": [_("A user named %(name)s exists already.") % {"name": username}]})
    password = temporary_password()
    with transaction.atomic():
        user = User.objects.create_user(username, email=email.strip(), password=password)
        _set_role(user, role)
        mark_temporary(user)
    return user, password


def change_role(user, role: str) -> None:
    _check_role(role)
    if user.is_superuser:
        raise ValidationError(
            _("%(user)s is a superuser and stays admin; manage superusers with manage.py.")
            % {"user": user.get_username()}
        )
    if role != ADMIN:
        _refuse_last_admin(user, _("demote"))
    with transaction.atomic():
        _set_role(user, role)


def set_active(user, active: bool, *, by) -> None:
    """Deactivate (sessions and API tokens stop working at the next request) or reactivate a user."""
    if not active:
        if user.pk == by.pk:
            raise ValidationError(_("You cannot deactivate yourself; ask another admin."))
        _refuse_last_admin(user, _("deactivate"))
    user.is_active = active
    user.save(update_fields=["is_active"])


def reset_password(user) -> str:
    """A new temporary password for the user (returned once); their API tokens stay as they are."""
    password = temporary_password()
    with transaction.atomic():
        user.set_password(password)
        user.save(update_fields=["password"])
        mark_temporary(user)
    return password


def users_with_roles() -> list[dict]:
    """Every user with their role ("" for none), for the Users page; two queries."""
    rows = []
    for user in get_user_model().objects.prefetch_related("groups").order_by("username"):
        names = {group.name for group in user.groups.all()}
        role = ADMIN if user.is_superuser else next((r for r in ROLES if r in names), "")
        rows.append({"user": user, "role": role})
    return rows
