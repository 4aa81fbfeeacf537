"""The fleet summary and the sampling interval treat SSH nodes as SSH nodes: a silent SSH node shows offline
in the summary at once, and changing its interval sends nothing to an agent queue nobody serves."""

from datetime import timedelta

import pytest
from django.utils import timezone

from panel.core.choices import NodeStatus
from panel.monitoring.services import fleet_summary, set_metrics_interval
from panel.nodes.models import Node
from workers.broker import broker_key, broker_redis
from workers.task_names import node_queue

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("_wired_to_redis")]


def ssh_node(name: str, silent_for: timedelta) -> Node:
    return Node.objects.create(
        name=name,
        transport="ssh",
        status=NodeStatus.ONLINE,
        ssh_host_key_fingerprint="SHA256:abc",
        last_heartbeat=timezone.now() - silent_for,
    )


def test_a_silent_ssh_node_is_offline_in_the_fleet_summary_before_the_sweeper_runs():
    ssh_node("ssh-quiet", silent_for=timedelta(hours=1))
    ssh_node("ssh-talking", silent_for=timedelta(seconds=1))
    statuses = {line["name"]: line["status"] for line in fleet_summary()["nodes"]}
    assert statuses == {"ssh-quiet": NodeStatus.OFFLINE, "ssh-talking": NodeStatus.ONLINE}


def test_the_metrics_interval_goes_to_an_agent_but_not_to_an_ssh_node():
    agent = Node.objects.create(name="agent-node", transport="agent")
    ssh = ssh_node("ssh-node", silent_for=timedelta(seconds=1))
    queued = {node.name: broker_key(node_queue(node.name)) for node in (agent, ssh)}
    broker_redis().delete(*queued.values())
    set_metrics_interval(agent, 2)
    set_metrics_interval(ssh, 2)
    assert broker_redis().llen(queued["agent-node"]) == 1
    assert broker_redis().llen(queued["ssh-node"]) == 0
    assert agent.sampling.interval_s == ssh.sampling.interval_s == 2
    broker_redis().delete(*queued.values())
