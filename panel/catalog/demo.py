"""`make run`'s ready-to-deploy model: the tiny chat model each sim host generates (`python -m workers.sim
create --tiny-chat-model`), registered as one catalog model with a copy per node, inspected by each node's
agent through the usual inspection operation. Safe to run at every start."""

import time

from django.db import close_old_connections, transaction
from django.utils import timezone
from django.utils.translation import gettext as _

from panel.catalog.copies import start_inspection
from panel.catalog.models import Model, ModelArtifact
from panel.core.domain.choices import ModelSource, NodeStatus, OperationKind, OperationStatus
from panel.nodes.models import Node
from panel.operations.models import Operation

DEMO_MODEL_NAME = "tiny-chat"


def ensure_demo_model(node_names: list[str], path: str, name: str = DEMO_MODEL_NAME) -> list[Operation]:
    """The model `name` with a copy at `path` on each node; a copy not inspected yet (a first start, or a
    start stopped before its agent answered) gets an inspection. Returns the inspections started."""
    nodes = list(Node.objects.filter(name__in=node_names))
    unknown = sorted(set(node_names) - {node.name for node in nodes})
    if unknown:
        raise ValueError(f"no node named {', '.join(unknown)}; create it first (manage.py ensure_demo_nodes)")
    started = []
    with transaction.atomic():
        model, _created = Model.objects.get_or_create(
            name=name,
            defaults={
                "source": ModelSource.LOCAL,
                "description": _(
                    "A tiny chat model generated on each simulated host by make run (random weights, a "
                    "tokenizer trained locally): it answers with noise, but deploys, logs, reports metrics "
                    "and chats with no hub or internet access."
                ),
            },
        )
        for node in nodes:
            artifact = ModelArtifact.objects.filter(node=node, path=path).first()
            if artifact is None:
                artifact = ModelArtifact.objects.create(model=model, node=node, path=path, ready=False)
            if artifact.ready or artifact.model_id != model.pk or _inspection_open(artifact):
                continue
            started.append(start_inspection(artifact))
    return started


def _inspection_open(artifact: ModelArtifact) -> bool:
    return Operation.objects.filter(
        node=artifact.node,
        kind=OperationKind.INSPECT_MODEL,
        params__artifact=artifact.pk,
        status__in=[OperationStatus.PENDING, OperationStatus.RUNNING],
    ).exists()


def wait_until_ready(node_names: list[str], path: str, timeout: float) -> list[str]:
    """Wait until each node's agent has sent a heartbeat since this call (a status left online by the last
    run proves nothing) and their copies at `path` are inspected; returns what is still not (empty when
    all is ready), so `make run` can say so instead of claiming a deploy would work."""
    deadline, since = time.monotonic() + timeout, timezone.now()
    while True:
        close_old_connections()
        heard = Node.objects.filter(name__in=node_names, status=NodeStatus.ONLINE, last_heartbeat__gte=since)
        waiting = [
            f"{name} not heard from" for name in set(node_names) - set(heard.values_list("name", flat=True))
        ]
        waiting += [
            f"{name}:{path} not inspected"
            for name in ModelArtifact.objects.filter(
                node__name__in=node_names, path=path, ready=False
            ).values_list("node__name", flat=True)
        ]
        if not waiting or time.monotonic() >= deadline:
            return sorted(waiting)
        time.sleep(0.5)
