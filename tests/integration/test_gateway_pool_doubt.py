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
