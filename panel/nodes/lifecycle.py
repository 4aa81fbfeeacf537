"""Use-cases that change the fleet: add a node (agent or SSH), change its settings, cordon. Confirming an SSH
host key starts an inventory (panel.operations.node_operations); drain and remove reach the node's
deployments (panel.deployments.rollouts.node_actions)."""

from dataclasses import dataclass
from datetime import datetime

from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import Q
from django.utils.translation import gettext as _

from panel.audit import actions as audit
from panel.audit.services import record
from panel.core.domain.choices import DeploymentState, DesiredState, NodeTransport
from panel.nodes.agents.agent_package import agent_sdist_sha256, install_script_sha256
from panel.nodes.agents.join import issue_join_token, join_command
from panel.nodes.agents.ssh import (
    check_address,
    check_env,
    host_key_fingerprint,
    sealed_credentials,
)
from panel.nodes.models import JoinToken, Node
from panel.nodes.models_roots import check_models_roots
from panel.realtime.broadcast import FLEET, broadcast

# A node whose deployments are in these states has an engine on it (or one on the way).
ACTIVE_DEPLOYMENT_STATES = (DeploymentState.STARTING, DeploymentState.RUNNING, DeploymentState.UNHEALTHY)


# Page paths under /nodes/ that a node name would shadow.
RESERVED_NAMES = {"add", "agent"}


class NodeActionRefused(Exception):
    """The node is not in a state that allows this action; the message says why and what to do."""


@dataclass(frozen=True)
class PendingAgent:
    name: str
    token: str
    expires: datetime
    join_command: str


def _check_new_name(name: str) -> None:
    if name in RESERVED_NAMES:
        raise ValidationError(
            {"name": [_("%(name)s is reserved by the panel's pages; choose another.") % {"name": name}]}
        )
    if Node.objects.filter(name=name).exists():
        raise ValidationError({"name": [_("A node named %(name)s exists already.") % {"name": name}]})


def add_agent_node(*, name: str, panel_url: str, panel_host: str, user=None) -> PendingAgent:
    """A join token for an agent to register `name`, and the command that installs the agent with it; the
    node appears with the agent's first heartbeat. panel_host is the Host the admin reached the panel by."""
    _check_new_name(name)
    token = issue_join_token(name, user=user)
    expires = JoinToken.objects.get(node_name=name, used__isnull=True).expires
    command = join_command(panel_url, name, token, install_script_sha256(), agent_sdist_sha256())
    record(user, audit.NODE_ADDED, name, transport="agent")
    return PendingAgent(name=name, token=token, expires=expires, join_command=command)


def rejoin_agent_node(node: Node, *, rotate_credential: bool, panel_url: str, user=None) -> PendingAgent:
    """A join token and command for an agent node that is already joined (a reinstalled host, a lost
    agent.env). Trading it in rotates the node's credential: the admin must say so (`rotate_credential`),
    and that is audited; the old credential stops working when the new one is issued."""
    if node.transport != NodeTransport.AGENT:
        raise NodeActionRefused(
            _("%(node)s is reached over SSH; install the agent on it instead.") % {"node": node.name}
        )
    if not rotate_credential:
        raise ValidationError(
            {
                "rotate_credential": [
                    _(
                        "Joining %(node)s again gives it a new credential and stops the old one; confirm "
                        "with rotate_credential to make the join command."
                    )
                    % {"node": node.name}
                ]
            }
        )
    token = issue_join_token(node.name, user=user, rotate_credential=True)
    expires = JoinToken.objects.get(node_name=node.name, used__isnull=True).expires
    command = join_command(panel_url, node.name, token, install_script_sha256(), agent_sdist_sha256())
    return PendingAgent(name=node.name, token=token, expires=expires, join_command=command)


def add_ssh_node(
    *,
    name: str,
    address: str,
    port: int = 22,
    username: str,
    client_key: str = "",
    password: str = "",
    labels=None,
    user=None,
) -> tuple[Node, str]:
    """Store an SSH node (its secret sealed) and return it with the host key fingerprint to confirm.

    Nothing runs on the host until the admin confirmed that fingerprint (confirm_host_key)."""
    _check_new_name(name)
    address = check_address(address)
    sealed = sealed_credentials(client_key, password)
    fingerprint = host_key_fingerprint(address, port)
    node = Node.objects.create(
        name=name,
        transport=NodeTransport.SSH,
        address=address,
        ssh_port=port,
        ssh_username=username,
        ssh_secret=sealed,
        labels=labels or {},
    )
    record(user, audit.NODE_ADDED, name, transport="ssh", address=address, username=username)
    return node, fingerprint


def update_settings(
    node: Node,
    *,
    labels=None,
    ssh_env=None,
    ssh_host_root=None,
    ssh_ascend_root=None,
    models_roots=None,
    **_ignored,
):
    fields = []
    if models_roots is not None:
        node.models_roots = check_models_roots(models_roots)
        fields.append("models_roots")
    if labels is not None:
        node.labels = labels
        fields.append("labels")
    if ssh_env is not None:
        node.ssh_env = check_env(ssh_env)
        fields.append("ssh_env")
    for field, value in (("ssh_host_root", ssh_host_root), ("ssh_ascend_root", ssh_ascend_root)):
        if value is not None:
            if not value.startswith("/"):
                raise ValidationError({field: [_("Give an absolute path, starting with /.")]})
            setattr(node, field, value)
            fields.append(field)
    if fields:
        node.save(update_fields=[*fields, "updated"])
    return node


def set_cordoned(node: Node, cordoned: bool) -> Node:
    """A cordoned node keeps what runs on it but gets no new deployments."""
    Node.objects.filter(pk=node.pk).update(cordoned=cordoned)
    node.cordoned = cordoned
    message = {"type": "node.cordon", "node": node.name, "cordoned": cordoned}
    transaction.on_commit(lambda: broadcast(FLEET, message))
    return node


def deployments_to_drain(node: Node) -> list:
    """Deployments that have an engine on the node (or are stopping it), or that the panel keeps running
    there: what a restart of its driver or the host would stop."""
    engine_states = (*ACTIVE_DEPLOYMENT_STATES, DeploymentState.STOPPING)
    return list(
        node.deployments.filter(
            Q(observed_state__in=engine_states) | Q(desired_state=DesiredState.RUNNING)
        ).order_by("name")
    )
