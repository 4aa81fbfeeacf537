"""The node page's NPU health override: an admin marks an NPU healthy (uncordons it) or sets it suspect or
failed, with a note for the audit log (panel.nodes.health.health_state.override)."""

from django.contrib import messages
from django.shortcuts import get_object_or_404, redirect
from django.utils.translation import gettext as _
from django.views.decorators.http import require_POST

from panel.accounts.roles import ADMIN
from panel.core.domain.choices import NpuHealthState
from panel.core.views import role_required
from panel.nodes.health import health_state
from panel.nodes.models import Node, Npu

HISTORY_ON_PAGE = 20


@role_required(ADMIN)
@require_POST
def npu_health_override(request, name):
    node = get_object_or_404(Node.objects.visible_to(request.user), name=name)
    given = request.POST.get("npu", "").strip()
    npu = get_object_or_404(Npu, node=node, pk=int(given) if given.isdigit() else 0)
    state = request.POST.get("state", "")
    if state not in NpuHealthState.values:
        messages.error(request, _("Choose In service, Suspect or Failed."))
        return redirect("nodes:detail", name=node.name)
    npu = health_state.override(npu, state, request.user, request.POST.get("note", ""))
    messages.info(
        request,
        _("NPU %(npu)s of %(node)s is now %(state)s.")
        % {"npu": f"{npu.npu_id}/{npu.chip_id}", "node": node.name, "state": npu.get_health_state_display()},
    )
    return redirect("nodes:detail", name=node.name)


def health_context(node: Node) -> dict:
    """What the node page shows of NPU health: the state choices and the latest changes."""
    return {
        "health_states": NpuHealthState.choices,
        "health_changes": node.npu_health_changes.select_related("user")[:HISTORY_ON_PAGE],
    }
