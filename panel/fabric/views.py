from django.contrib import messages
from django.shortcuts import get_object_or_404, redirect
from django.utils.translation import gettext as _
from django.views.decorators.http import require_POST

from panel.accounts.roles import OPERATOR
from panel.core.views import role_required
from panel.fabric import services
from panel.nodes.models import Node
from panel.operations.models import Operation


@role_required(OPERATOR)
@require_POST
def check_node(request, name):
    """Check one node's NPU network from its page; the operation page then shows it running."""
    node = get_object_or_404(Node.objects.visible_to(request.user), name=name)
    if not services.devices_of(node):
        messages.error(
            request, _("%(node)s has no NPUs with logic ids yet: run an inventory.") % {"node": node.name}
        )
        return redirect("nodes:detail", name=node.name)
    check = services.start_check([node], user=request.user)
    operation = Operation.objects.filter(params__fabric_check=check.pk).first()
    messages.info(request, _("Checking the NPU network of %(node)s.") % {"node": node.name})
    return redirect("operations:detail", pk=operation.pk)
