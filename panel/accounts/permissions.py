from rest_framework import permissions

from panel.accounts.roles import OPERATOR, VIEWER, has_role


class RolePermission(permissions.BasePermission):
    """Reading needs any role; writing needs the view's `write_role` (operator unless it says otherwise)."""

    def has_permission(self, request, view):
        if request.method in permissions.SAFE_METHODS:
            return has_role(request.user, getattr(view, "read_role", VIEWER))
        return has_role(request.user, getattr(view, "write_role", OPERATOR))
