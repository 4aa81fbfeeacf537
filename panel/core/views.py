from functools import wraps

from django.contrib.auth.views import redirect_to_login
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.shortcuts import render
from django.views.decorators.http import require_safe

from panel.accounts.roles import VIEWER, has_role
from panel.core.web.dashboard import card_texts, first_summary, node_tiles, page_labels
from panel.nodes.filtersets import NODES_PER_PAGE, NodeFilterSet
from panel.nodes.models import Node

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
    """The home page: fleet figures, then the NPU cards of one page of nodes (filtered by NodeFilterSet, the
    page links keep the filter); static/js/dashboard.js keeps them live."""
    nodes = Node.objects.visible_to(request.user).prefetch_related("npus__deployments")
    filterset = NodeFilterSet(request.GET, queryset=nodes)
    page = Paginator(filterset.qs, NODES_PER_PAGE).get_page(request.GET.get("page"))
    return render(
        request,
        "core/dashboard.html",
        {
            "page": page,
            "tiles": node_tiles(list(page.object_list)),
            "summary": first_summary(),
            "filter": filterset,
            "filtered": any(request.GET.get(name) for name in filterset.filters),
            "labels": page_labels(),
            "card": card_texts(),
        },
    )
