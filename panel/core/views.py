from functools import wraps

from django.contrib.auth.views import redirect_to_login
from django.core.exceptions import PermissionDenied
from django.shortcuts import render
from django.views.decorators.http import require_safe

from panel.accounts.roles import VIEWER, has_role
from panel.core.dashboard import fleet_totals, node_tiles, page_labels

# extra_tags of a flash message that tells of a change under way ("… is starting"): base.html marks it
# data-message="transition" and the live page removes it once what it tells of has settled.
TRANSITION = "transition"


def role_required(role: str):
    """Page views: sign-in required, then the role (viewer < operator < admin)."""

    def decorator(view):
        @wraps(view)
        def wrapper(request, *args, **kwargs):
            if not request.user.is_authenticated:
                return redirect_to_login(request.get_full_path())
            if not has_role(request.user, role):
                raise PermissionDenied
            return view(request, *args, **kwargs)

        return wrapper

    return decorator


@role_required(VIEWER)
@require_safe
def dashboard(request):
    """The home page: fleet figures, then every node's NPU cards; static/js/dashboard.js keeps them live."""
    tiles = node_tiles(request.user)
    return render(
        request,
        "core/dashboard.html",
        {"tiles": tiles, "totals": fleet_totals(tiles), "labels": page_labels()},
    )
