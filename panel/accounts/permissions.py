from rest_framework import permissions

from panel.accounts.roles import OPERATOR, VIEWER, has_role


class RolePermission(permissions.BasePermission):
    """Reading needs any role; writing needs the view's `write_role` (operator unless it says otherwise)."""

    def has_permission(self, request, view):
        if not request.user or not request.user.is_authenticated:
            # DRF throttles after the permission check, so an anonymous flood (token guessing) would only
            # ever see 401. Throttle it first: past the anonymous rate it gets 429. Refused requests never
            # reach DRF's own throttle check, so nothing is counted twice.
            view.check_throttles(request)
            return False
        if request.method in permissions.SAFE_METHODS:
            return has_role(request.user, getattr(view, "read_role", VIEWER))
        return has_role(request.user, getattr(view, "write_role", OPERATOR))
