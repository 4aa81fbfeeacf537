"""Who is in a served name's pool when /health probes miss (panel/gateway/instances/pool.py): an engine whose
last probe missed leaves the pool at once while another passes; when every engine missed its last probe and
none is known dead (a loaded host: the probes miss together), all of them are routed to rather than none; a
dead one (`unhealthy`) never is."""

import pytest

from tests.integration.test_deployment_apply import client, npu_node, put, tiny
from tests.integration.test_deployment_replicas import one_npu, settle

pytestmark = pytest.mark.django_db

__all__ = ["client", "npu_node", "tiny"]  # fixtures used by name


def members(name: str) -> list[str]:
    from panel.gateway.instances.pool import pool_for

    return sorted(instance.id for instance in pool_for(name).instances)


def test_missed_probes_take_an_engine_out_unless_every_engine_missed_them(client, tiny):
    from panel.deployments.models import Deployment

    put(client, "chat", one_npu(replicas=2))
    settle()
    assert members("chat") == ["chat-r2/0", "chat/0"]
    Deployment.objects.filter(name="chat").update(probe_failures=1)
    assert members("chat") == ["chat-r2/0"]
    Deployment.objects.filter(name="chat-r2").update(probe_failures=2)
    assert members("chat") == ["chat-r2/0", "chat/0"]  # all in doubt: all of them, not none
    Deployment.objects.filter(name="chat-r2").update(observed_state="unhealthy")
    assert members("chat") == ["chat/0"]  # the dead one stays out


def test_an_engine_on_a_failed_npu_an_offline_or_a_draining_node_is_out_of_the_pool(client, tiny):
    """The pool asks failover.cause_of only of the engines one query finds could be excluded; what it
    leaves out is what cause_of says, and a cordoned node that does not drain this engine keeps it in."""
    from panel.deployments.models import Deployment
    from panel.nodes.models import Node, Npu

    put(client, "chat", one_npu(replicas=3))
    settle()
    assert members("chat") == ["chat-r2/0", "chat-r3/0", "chat/0"]
    rows = {d.name: d for d in Deployment.objects.filter(name__startswith="chat")}
    (node,) = rows["chat"].nodes.all()
    Node.objects.filter(pk=node.pk).update(cordoned=True, drained=["someone-else"])
    assert members("chat") == ["chat-r2/0", "chat-r3/0", "chat/0"]  # cordoned, but draining none of them
    failed = Npu.objects.create(node=node, npu_id=99, health_state="failed")
    rows["chat-r2"].npus.add(failed)
    assert members("chat") == ["chat-r3/0", "chat/0"]
    Node.objects.filter(pk=node.pk).update(drained=["chat-r3"])
    assert members("chat") == ["chat/0"]
    Node.objects.filter(pk=node.pk).update(cordoned=False, status="offline")
    assert members("chat") == []  # every engine's node is offline: none serves
