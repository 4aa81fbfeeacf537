"""Use-cases that change the fleet: add a node (agent or SSH), confirm an SSH host key, cordon, drain,
remove."""

from dataclasses import dataclass
from datetime import datetime

from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import Q
from django.utils import timezone
from django.utils.translation import gettext as _

from panel.audit import actions as audit
from panel.audit.services import record
from panel.core.choices import DeploymentState, DesiredState, NodeStatus, NodeTransport, OperationStatus
from panel.nodes import broker_admin
from panel.nodes.agent_package import agent_sdist_sha256, install_script_sha256
from panel.nodes.join import issue_join_token, join_command
from panel.nodes.models import JoinToken, Node
from panel.nodes.services import _announce
from panel.nodes.ssh import (
    check_address,
    check_env,
    check_fingerprint,
    host_key_fingerprint,
    sealed_credentials,
)
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
    expires = JoinToken.objects.filter(node_name=name).latest("created").expires
    command = join_command(panel_url, name, token, install_script_sha256(), agent_sdist_sha256())
    record(user, audit.NODE_ADDED, name, transport="agent")
    return PendingAgent(name=name, token=token, expires=expires, join_command=command)


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


def confirm_host_key(node: Node, fingerprint: str, user=None):
    """Pin the fingerprint the admin confirmed, if the host still presents it, then inventory the node."""
    from panel.nodes.operations import start_inventory

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
        # The host just answered; from now on its SSH probes keep this fresh (panel.nodes.ssh_probes).
        node.last_heartbeat = timezone.now()
        node.save(update_fields=["ssh_host_key_fingerprint", "status", "last_heartbeat", "updated"])
        _announce(node)
        return start_inventory(node, user=user)


def update_settings(
    node: Node, *, labels=None, ssh_env=None, ssh_host_root=None, ssh_ascend_root=None, **_ignored
):
    fields = []
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


def drain(node: Node, user=None) -> list:
    """Cordon the node and stop every deployment on it, so an install that restarts its NPU driver or the
    host may run. Returns the deployments asked to stop (those already stopping are left to finish)."""
    from panel.deployments.services import stop

    with transaction.atomic():
        set_cordoned(node, True)
        stopped = [
            d
            for d in deployments_to_drain(node)
            if d.desired_state != DesiredState.DELETED and d.observed_state != DeploymentState.STOPPING
        ]
        for deployment in stopped:
            stop(deployment, user)
    return stopped


def remove_node(node: Node, *, force: bool = False) -> None:
    """Forget a node, and on the fleet's broker delete its broker user (its connections are closed).
    Refused while deployments run on it or were made from its model copies, unless forced: then those
    deployments are marked failed (their engines are left running on the host), lose their link to the
    copy, and the node's unfinished operations are ended."""
    from panel.deployments.models import Deployment
    from panel.operations.services import mark_lost

    with transaction.atomic():
        active = list(node.deployments.filter(observed_state__in=ACTIVE_DEPLOYMENT_STATES).order_by("name"))
        if active and not force:
            raise NodeActionRefused(
                _(
                    "%(node)s runs deployments %(names)s. Stop them first, or remove the node with force "
                    "(they will be marked failed; their engines keep running on the host)."
                )
                % {"node": node.name, "names": ", ".join(d.name for d in active)}
            )
        made_here = sorted(set(Deployment.objects.filter(artifact__node=node).values_list("name", flat=True)))
        if made_here and not force:
            raise NodeActionRefused(
                _(
                    "Deployments %(names)s were made from model copies on %(node)s. Delete them first, or "
                    "remove the node with force."
                )
                % {"node": node.name, "names": ", ".join(made_here)}
            )
        for deployment in active:
            deployment.move_to(
                DeploymentState.FAILED, reason=_("Node %(node)s was removed.") % {"node": node.name}
            )
            deployment.save(update_fields=["observed_state", "reason", "updated"])
        # The node's model copies go with it; a deployment made from one keeps its launch spec (the path).
        Deployment.objects.filter(artifact__node=node).update(artifact=None)
        unfinished = node.operations.exclude(status__in=OperationStatus.TERMINAL)
        for operation in unfinished:
            mark_lost(operation, _("Node %(node)s was removed.") % {"node": node.name})
        JoinToken.objects.filter(node_name=node.name, used__isnull=True).delete()
        name = node.name
        record(None, audit.NODE_REMOVED, name, force=force, failed_deployments=[d.name for d in active])
        node.delete()
        if broker_admin.fleet_broker():  # last: a broker that refuses leaves the node in place
            try:
                broker_admin.deprovision_node(name)
            except broker_admin.BrokerAdminError as error:
                raise NodeActionRefused(
                    _("The node's broker user could not be deleted, so the node was kept: %(error)s")
                    % {"error": error}
                ) from None
        transaction.on_commit(lambda: broadcast(FLEET, {"type": "node.removed", "node": name}))
