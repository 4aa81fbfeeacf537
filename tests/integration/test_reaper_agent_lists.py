"""The reaper re-sends a running operation its agent no longer lists, judged by the heartbeat that brought
the lists (Node.agent_reported_at), not by last_heartbeat: metrics batches move that one too, and at 512
nodes heartbeats dropped while the inbox lagged left lists older than it, so the bench saw streaming
operations sent again to agents that were running them."""

from datetime import timedelta

import pytest
from django.utils import timezone

from panel.nodes.models import Node
from panel.operations.models import Operation
from panel.operations.reaper import lost_by_agent

pytestmark = pytest.mark.django_db


@pytest.fixture
def running():
    node = Node.objects.create(name="busy-node", transport="agent", heartbeat_interval=5)
    sent = timezone.now() - timedelta(seconds=120)
    operation = Operation.objects.create(
        kind="inventory", node=node, target=node.name, task_name="agent.inventory", status="running"
    )
    Operation.objects.filter(pk=operation.pk).update(sent_at=sent, started=sent, updated=sent)
    return Operation.objects.select_related("node").get(pk=operation.pk)


def reported(operation, *, lists_at, running_ids=()) -> bool:
    Node.objects.filter(pk=operation.node_id).update(
        last_heartbeat=timezone.now(),
        agent_reported_at=lists_at,
        agent_running=list(running_ids),
        agent_done=[],
    )
    return lost_by_agent(Operation.objects.select_related("node").get(pk=operation.pk))


def test_lists_older_than_the_operation_say_nothing_however_fresh_the_metrics(running):
    assert not reported(running, lists_at=None)
    assert not reported(running, lists_at=timezone.now() - timedelta(seconds=125))


def test_a_newer_heartbeat_that_does_not_list_it_means_the_agent_lost_it(running):
    assert reported(running, lists_at=timezone.now())


def test_a_newer_heartbeat_that_lists_it_means_it_runs(running):
    assert not reported(running, lists_at=timezone.now(), running_ids=[str(running.pk)])
