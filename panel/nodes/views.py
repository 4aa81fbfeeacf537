from django.contrib import messages
from django.shortcuts import get_object_or_404, redirect, render
from django.utils.translation import gettext as _
from django.views.decorators.http import require_POST

from panel.accounts.roles import OPERATOR, VIEWER
from panel.core.views import role_required
from panel.nodes.models import Node
from panel.nodes.operations import start_inventory


@role_required(VIEWER)
def node_list(request):
    nodes = Node.objects.visible_to(request.user).prefetch_related("npus")
    return render(request, "nodes/list.html", {"nodes": nodes})


@role_required(VIEWER)
def node_detail(request, name):
    node = get_object_or_404(Node.objects.visible_to(request.user), name=name)
    operations = node.operations.select_related("created_by")[:20]
    return render(
        request, "nodes/detail.html", {"node": node, "npus": node.npus.all(), "operations": operations}
    )


@role_required(OPERATOR)
@require_POST
def run_inventory(request, name):
    node = get_object_or_404(Node.objects.visible_to(request.user), name=name)
    operation = start_inventory(node, user=request.user)
    messages.info(request, _("Inventory of %(node)s started.") % {"node": node.name})
    return redirect("operations:detail", pk=operation.pk)
