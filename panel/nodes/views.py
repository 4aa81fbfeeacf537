import json
import logging

from django.contrib import messages
from django.core.exceptions import ValidationError
from django.core.paginator import Paginator
from django.db.models import Count
from django.http import HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.utils.http import url_has_allowed_host_and_scheme
from django.utils.translation import gettext as _
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_GET, require_POST, require_safe

from panel.accounts.roles import ADMIN, OPERATOR, VIEWER, has_role
from panel.core.domain.choices import NodeStatus, NodeTransport
from panel.core.views import role_required
from panel.deployments.rollouts import node_actions
from panel.nodes import lifecycle
from panel.nodes.agents.agent_package import INSTALL_SCRIPT, UNIT_FILE, agent_sdist
from panel.nodes.agents.broker_admin import BrokerAdminError, broker_ca_pem
from panel.nodes.agents.join import JoinRefused, agent_broker, agent_broker_url, exchange_join_token
from panel.nodes.agents.ssh import host_key_fingerprint
from panel.nodes.agents.trust import refuse
from panel.nodes.filtersets import NODES_PER_PAGE, NodeFilterSet
from panel.nodes.forms import NodeAddForm, NodeSettingsForm
from panel.nodes.health_views import health_context
from panel.nodes.image_views import images_context
from panel.nodes.models import JoinToken, Node
from panel.nodes.presentation import facts_view, inventory_changes_view, topology_view, versions_view
from panel.operations import node_operations
from panel.operations.node_operations import start_install_agent, start_inventory

log = logging.getLogger(__name__)


def _node(request, name):
    return get_object_or_404(Node.objects.visible_to(request.user), name=name)


def _panel_url(request) -> str:
    return request.build_absolute_uri("/").rstrip("/")


@role_required(VIEWER)
@require_safe
def node_list(request):
    """One page of nodes (NODES_PER_PAGE), filtered by NodeFilterSet; the page links keep the filters."""
    # Ordered here: a query with an aggregate does not take Meta.ordering.
    nodes = Node.objects.visible_to(request.user).annotate(npu_count=Count("npus")).order_by("name")
    filterset = NodeFilterSet(request.GET, queryset=nodes)
    page = Paginator(filterset.qs, NODES_PER_PAGE).get_page(request.GET.get("page"))
    waiting = JoinToken.objects.filter(used__isnull=True, expires__gt=timezone.now()).exclude(
        node_name__in=Node.objects.values("name")
    )
    return render(
        request,
        "nodes/list.html",
        {
            "page": page,
            "filter": filterset,
            "filtered": any(request.GET.get(name) for name in filterset.filters),
            "waiting": waiting.order_by("node_name"),
            "is_admin": has_role(request.user, ADMIN),
        },
    )


@role_required(VIEWER)
@require_safe
def node_detail(request, name):
    node = _node(request, name)
    return render(
        request,
        "nodes/detail.html",
        {
            "node": node,
            "npus": node.npus.all(),
            "operations": node.operations.select_related("created_by")[:20],
            "deployments": node.deployments.order_by("name"),
            "facts": facts_view(node.facts),
            "topology": topology_view(node.facts.get("npu_topology")),
            "versions": versions_view(node.versions),
            "changes": inventory_changes_view(node.inventory_changes),
            "is_admin": has_role(request.user, ADMIN),
            "status_labels": {value: str(label) for value, label in NodeStatus.choices},
            "containers": images_context(node),
            **health_context(node),
        },
    )


@role_required(ADMIN)
def node_add(request):
    form = NodeAddForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        try:
            if data["transport"] == NodeTransport.AGENT:
                pending = lifecycle.add_agent_node(
                    name=data["name"],
                    panel_url=_panel_url(request),
                    panel_host=request.get_host(),
                    user=request.user,
                )
                return render(
                    request,
                    "nodes/join.html",
                    {
                        "pending": pending,
                        "command": pending.join_command,
                        "broker": agent_broker(request.get_host()),
                    },
                )
            node, _fingerprint = lifecycle.add_ssh_node(
                name=data["name"],
                address=data["address"],
                port=data["port"],
                username=data["username"],
                client_key=data["client_key"],
                password=data["password"],
                user=request.user,
            )
            return redirect("nodes:confirm-host-key", name=node.name)
        except ValidationError as error:
            form.add_error(None, error)
    return render(request, "nodes/add.html", {"form": form, "broker": agent_broker(request.get_host())})


@role_required(ADMIN)
@require_POST
def rejoin(request, name):
    """A new join command for a joined agent node; it rotates the node's credential, so the admin ticks
    that (lifecycle.rejoin_agent_node refuses without it)."""
    node = _node(request, name)
    try:
        pending = lifecycle.rejoin_agent_node(
            node,
            rotate_credential=request.POST.get("rotate_credential") == "1",
            panel_url=_panel_url(request),
            user=request.user,
        )
    except (ValidationError, lifecycle.NodeActionRefused) as error:
        messages.error(request, " ".join(getattr(error, "messages", [str(error)])))
        return redirect("nodes:detail", name=node.name)
    context = {"pending": pending, "command": pending.join_command}
    return render(request, "nodes/join.html", {**context, "broker": agent_broker(request.get_host())})


@role_required(ADMIN)
def confirm_host_key(request, name):
    node = _node(request, name)
    if request.method == "POST":
        try:
            operation = node_operations.confirm_host_key(
                node, request.POST.get("fingerprint", ""), user=request.user
            )
        except (ValidationError, lifecycle.NodeActionRefused) as error:
            messages.error(request, " ".join(getattr(error, "messages", [str(error)])))
            return redirect("nodes:confirm-host-key", name=node.name)
        messages.success(
            request, _("Host key confirmed; inventory of %(node)s started.") % {"node": node.name}
        )
        return redirect("operations:detail", pk=operation.pk)
    fingerprint, problem, details = "", "", []
    try:
        fingerprint = host_key_fingerprint(node.address, node.ssh_port)
    except ValidationError as failure:
        problem, *details = failure.messages
    return render(
        request,
        "nodes/confirm_host_key.html",
        {"node": node, "fingerprint": fingerprint, "error": problem, "details": details},
    )


@role_required(ADMIN)
def node_settings(request, name):
    node = _node(request, name)
    form = NodeSettingsForm(request.POST or None, initial=NodeSettingsForm.initial_for(node))
    if request.method == "POST" and form.is_valid():
        try:
            lifecycle.update_settings(node, **form.cleaned_data)
        except ValidationError as error:
            form.add_error(None, error)
        else:
            messages.success(request, _("Settings of %(node)s saved.") % {"node": node.name})
            return redirect("nodes:detail", name=node.name)
    return render(request, "nodes/settings.html", {"node": node, "form": form})


def _start(request, node, start, *args, **kwargs):
    try:
        operation = start(node, *args, **kwargs)
    except (lifecycle.NodeActionRefused, ValidationError) as error:
        messages.error(request, " ".join(getattr(error, "messages", [str(error)])))
        return redirect("nodes:detail", name=node.name)
    return redirect("operations:detail", pk=operation.pk)


@role_required(OPERATOR)
@require_POST
def run_inventory(request, name):
    node = _node(request, name)
    messages.info(request, _("Inventory of %(node)s started.") % {"node": node.name})
    return _start(request, node, start_inventory, user=request.user)


@role_required(ADMIN)
@require_POST
def install_agent(request, name):
    node = _node(request, name)
    return _start(request, node, start_install_agent, panel_url=_panel_url(request), user=request.user)


@role_required(OPERATOR)
@require_POST
def cordon(request, name):
    node = lifecycle.set_cordoned(_node(request, name), request.POST.get("cordoned", "1") == "1")
    if node.cordoned:
        messages.info(request, _("%(node)s is cordoned: no new deployments go there.") % {"node": node.name})
    else:
        messages.info(request, _("%(node)s is uncordoned.") % {"node": node.name})
    return redirect("nodes:detail", name=node.name)


@role_required(OPERATOR)
@require_POST
def drain(request, name):
    node = _node(request, name)
    stopped = node_actions.drain(node, user=request.user)
    if stopped:
        names = ", ".join(d.name for d in stopped)
        messages.info(
            request,
            _("%(node)s is cordoned and these deployments are stopping: %(names)s.")
            % {"node": node.name, "names": names},
        )
    else:
        messages.info(request, _("%(node)s is cordoned; no deployment runs on it.") % {"node": node.name})
    back = request.POST.get("next", "")
    if back and url_has_allowed_host_and_scheme(back, allowed_hosts={request.get_host()}):
        return redirect(back)
    return redirect("nodes:detail", name=node.name)


@role_required(ADMIN)
@require_POST
def remove(request, name):
    node = _node(request, name)
    try:
        node_actions.remove_node(node, force=request.POST.get("force") == "1")
    except lifecycle.NodeActionRefused as error:
        messages.error(request, str(error))
        return redirect("nodes:detail", name=node.name)
    messages.success(request, _("Node %(node)s removed.") % {"node": name})
    return redirect("nodes:list")


# What an agent host downloads; no sign-in (curl on a new host has none) and nothing secret in them.
@require_GET
def agent_install_script(request):
    return HttpResponse(INSTALL_SCRIPT.read_bytes(), content_type="text/x-shellscript; charset=utf-8")


@require_GET
def agent_unit(request):
    return HttpResponse(UNIT_FILE.read_bytes(), content_type="text/plain; charset=utf-8")


@csrf_exempt  # no session: the install script authenticates with the join token it trades in
@require_POST
def agent_join(request):
    """Trade a join token for the node's credential and the broker address (once). JSON in and out."""
    usage = 'send JSON {"node": NAME, "token": JOIN_TOKEN}'
    try:
        body = json.loads(request.body or b"{}")
    except ValueError:
        body = None
    if not isinstance(body, dict) or not body.get("node") or not body.get("token"):
        return JsonResponse({"detail": f"a join token is required: {usage}"}, status=403)
    node_name, token = str(body["node"]), str(body["token"])
    try:
        node, key, broker_password = exchange_join_token(node_name, token)
    except JoinRefused as refusal:
        refuse("join", node_name, str(refusal), "join")
        return JsonResponse({"detail": str(refusal)}, status=403)
    except BrokerAdminError as error:  # nothing was joined: the token still works once the broker does
        log.error("node %s could not join: %s", node_name, error)
        return JsonResponse(
            {"detail": f"the panel could not create this node's broker user: {error}"}, status=503
        )
    log.info("node %s joined from %s", node.name, request.META.get("REMOTE_ADDR"))
    answer = {
        "node": node.name,
        "agent_key": key.decode(),
        "broker_url": agent_broker_url(request.get_host(), node.name, broker_password),
    }
    if broker_password and (ca_pem := broker_ca_pem()):
        answer["broker_ca_pem"] = ca_pem  # the agent pins the broker's CA it is given here
    return JsonResponse(answer)


@require_GET
def agent_package(request):
    response = HttpResponse(agent_sdist(), content_type="application/gzip")
    response["Content-Disposition"] = 'attachment; filename="ascend-panel.tar.gz"'
    return response
