"""Operations that act on a node: inventory (also once, when a node that never had one first speaks, and
when an SSH node's host key is confirmed) and the agent's install onto an SSH node."""

from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext as _

from panel.core.domain.choices import NodeStatus, NodeTransport, OperationKind, OperationStatus
from panel.nodes.agents.agent_package import INSTALL_SCRIPT, agent_sdist_sha256
from panel.nodes.agents.join import issue_join_token
from panel.nodes.agents.ssh import check_fingerprint, host_key_fingerprint, sealed_for_central_agent
from panel.nodes.lifecycle import NodeActionRefused
from panel.nodes.models import Node
from panel.nodes.services import _announce
from panel.operations.services import create_operation
from workers.task_names import AGENT_INSTALL_AGENT, AGENT_INVENTORY


def _check_reachable(node) -> None:
    if node.transport == NodeTransport.SSH and not node.ssh_host_key_fingerprint:
        raise NodeActionRefused(
            _("Confirm the host key fingerprint of %(node)s first; nothing runs on it before that.")
            % {"node": node.name}
        )


def start_inventory(node, user=None):
    _check_reachable(node)
    return create_operation(kind=OperationKind.INVENTORY, node=node, task_name=AGENT_INVENTORY, user=user)


def start_install_agent(node, *, panel_url: str, user=None):
    """Install the agent onto an SSH node through the central agent, which feeds the install script a fresh
    join token on stdin; the token travels sealed for the central agent's key (only it, or the panel, opens
    it) and never reaches a command line. The script trades it for the node's own credential."""
    if node.transport != NodeTransport.SSH:
        raise NodeActionRefused(
            _("%(node)s already runs an agent; reinstall it with the one-line command on the host.")
            % {"node": node.name}
        )
    _check_reachable(node)
    # The admin asked for the agent: its credential replaces whatever the node had (audited with the token).
    token = issue_join_token(node.name, user=user, rotate_credential=True)
    script_args = [
        "--panel",
        panel_url.rstrip("/"),
        "--node",
        node.name,
        "--package-sha256",
        agent_sdist_sha256(),
    ]
    return create_operation(
        kind=OperationKind.INSTALL,
        node=node,
        task_name=AGENT_INSTALL_AGENT,
        user=user,
        target="ascend-panel-agent",
        params={"component": "agent", "panel": panel_url},
        task_kwargs={
            "script": INSTALL_SCRIPT.read_text(),
            "script_args": script_args,
            "sealed_token": sealed_for_central_agent(token),
        },
    )


def inventory_once(node: Node) -> None:
    """A node that was never inventoried gets one as soon as its agent speaks, so its NPUs show at once."""
    busy = node.operations.filter(kind=OperationKind.INVENTORY).exclude(status__in=OperationStatus.TERMINAL)
    recent_failure = node.operations.filter(
        kind=OperationKind.INVENTORY, status=OperationStatus.FAILED
    ).exists()
    if not busy.exists() and not recent_failure:
        start_inventory(node)


def confirm_host_key(node: Node, fingerprint: str, user=None):
    """Pin the fingerprint the admin confirmed, if the host still presents it, then inventory the node."""
    if node.transport != NodeTransport.SSH:
        raise NodeActionRefused(_("%(node)s is an agent node; it has no SSH host key.") % {"node": node.name})
    confirmed = check_fingerprint(fingerprint)
    presented = host_key_fingerprint(node.address, node.ssh_port)
    if presented != confirmed:
        raise ValidationError(
            {
                "fingerprint": [
                    _(
                        "%(address)s now presents %(presented)s, not the confirmed %(confirmed)s; "
                        "nothing was stored. Check the host's key "
                        "(ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub) before confirming again."
                    )
                    % {"address": node.address, "presented": presented, "confirmed": confirmed}
                ]
            }
        )
    with transaction.atomic():
        node.ssh_host_key_fingerprint = confirmed
        node.status = NodeStatus.ONLINE
        # The host just answered; from now on its SSH probes keep this fresh
        # (panel.monitoring.metrics.ssh_probes).
        node.last_heartbeat = timezone.now()
        node.save(update_fields=["ssh_host_key_fingerprint", "status", "last_heartbeat", "updated"])
        _announce(node)
        return start_inventory(node, user=user)
