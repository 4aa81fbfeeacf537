"""After the work a drain made room for (an install that restarts the NPU driver or the host): uncordon the
node and start again the deployments the drain stopped (Node.drained), those still there and still meant
to be stopped. The provisioning and operation pages offer it once the install finished."""

from django.db import transaction

from panel.core.domain.choices import DesiredState
from panel.deployments import services
from panel.deployments.models import Deployment
from panel.nodes.lifecycle import set_cordoned
from panel.nodes.models import Node


def resume_after_drain(node: Node, user=None) -> tuple[list[Deployment], list[Deployment]]:
    """Uncordon `node` and start what its drain stopped: (started, busy). A deployment still stopping is
    busy: it stays on the node's list, for the button to try again."""
    started, busy = [], []
    with transaction.atomic():
        set_cordoned(node, False)
        waiting = Deployment.objects.filter(name__in=node.drained, desired_state=DesiredState.STOPPED)
        for deployment in waiting.order_by("name"):
            try:
                started.append(services.start(deployment, user))
            except services.DeploymentConflict:
                busy.append(deployment)
        node.drained = [d.name for d in busy]
        Node.objects.filter(pk=node.pk).update(drained=node.drained)
    return started, busy
