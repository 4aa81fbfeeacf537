"""Node actions that reach the node's deployments: drain (cordon, stop them) and remove (refused while they
run there, unless forced). Here rather than in panel.nodes.lifecycle because they act on deployments and
operations, both above nodes (docs/architecture.md)."""

from django.db import transaction
from django.utils.translation import gettext as _

from panel.audit import actions as audit
from panel.audit.services import record
from panel.core.domain.choices import DeploymentState, DesiredState, OperationStatus
from panel.deployments.models import Deployment
from panel.deployments.services import stop
from panel.nodes.agents import broker_admin
from panel.nodes.lifecycle import (
    ACTIVE_DEPLOYMENT_STATES,
    NodeActionRefused,
    deployments_to_drain,
    set_cordoned,
)
from panel.nodes.models import JoinToken, Node
from panel.operations.services import mark_lost
from panel.realtime.broadcast import FLEET, broadcast


def drain(node: Node, user=None) -> list:
    """Cordon the node and stop every deployment on it, so an install that restarts its NPU driver or the
    host may run. Returns the deployments asked to stop (those already stopping are left to finish)."""
    with transaction.atomic():
        set_cordoned(node, True)
        stopped = [
            d
            for d in deployments_to_drain(node)
            if d.desired_state != DesiredState.DELETED and d.observed_state != DeploymentState.STOPPING
        ]
        for deployment in stopped:
            stop(deployment, user)
        drained = sorted({*node.drained, *(d.name for d in stopped)})
        Node.objects.filter(pk=node.pk).update(drained=drained)
        node.drained = drained
    return stopped


def remove_node(node: Node, *, force: bool = False) -> None:
    """Forget a node, and on the fleet's broker delete its broker user (its connections are closed).
    Refused while deployments run on it or were made from its model copies, unless forced: then those
    deployments are marked failed (their engines are left running on the host), lose their link to the
    copy, and the node's unfinished operations are ended."""
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
