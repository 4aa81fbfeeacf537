"""Failover under a streaming client (issue 37 item 3): an NPU under one of two replicas fails; the gateway
stops sending it requests at once, the leader starts the replica again on healthy NPUs through the rolling
update's surge path (a surge serves before the sick replica is restarted off the failed NPU), records a
`replica_moved` decision naming the NPU and its signal, and the client loses no request."""

import time

import pytest
from django.db import transaction
from django.utils import timezone

import panel.deployments.tasks  # noqa: F401  registers the panel's probe ingest on the shared app
from panel.core.domain.choices import DecisionKind, NpuHealthState
from panel.deployments.decision_models import Decision
from panel.deployments.models import Deployment
from panel.nodes.models import Npu
from panel.nodes.signals import npu_health_changed
from tests.conftest import api_client_for
from tests.deployment_helpers import wait_for
from tests.e2e.test_gateway_disruptions import StreamingClient, replicas_running, sim_spec
from tests.gateway_helpers import drained, key_for

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.timeout(300),
    pytest.mark.usefixtures("own_ports", "fresh_gateway_state"),
]


def fail(npu: Npu, signal: str) -> None:
    """What the health policy does when a signal takes an NPU out of service."""
    with transaction.atomic():
        old = npu.health_state
        npu.health_state = NpuHealthState.FAILED
        npu.health_reason = {"signal": signal, "detail": "npu-smi health Critical", "by": "policy"}
        npu.health_changed_at = timezone.now()
        npu.save()
        npu_health_changed.send(Npu, npu=npu, old=old, new=npu.health_state, reason=npu.health_reason)


def moved_off(name: str, npu: Npu) -> bool:
    row = Deployment.objects.get(name=name)
    return row.observed_state == "running" and not row.npus.filter(pk=npu.pk).exists()


@pytest.mark.usefixtures("reconcile_loop")
def test_a_replica_on_a_failed_npu_is_moved_surge_first_and_the_client_loses_no_request(
    node_with_npus, tiny_model, bob, gateway, monkeypatch
):
    monkeypatch.setenv("SIM_ENGINE_START_DELAY", "0.3")
    monkeypatch.setenv("SIM_ENGINE_TOKEN_DELAY", "0.05")
    model, folder = tiny_model
    client = api_client_for(bob)
    created = client.put("/api/v1/deployments/chat/", sim_spec(model, folder, replicas=2), format="json")
    assert created.status_code == 201, created.json()
    wait_for(lambda: replicas_running(client, "chat", 2), 60, "two replicas running")
    sick = Deployment.objects.get(name="chat-r2").npus.get()

    with StreamingClient(gateway, key_for(bob)) as streaming:
        wait_for(lambda: len(streaming.results) >= 3, 30, "the client streaming")
        failed_at = time.monotonic()
        fail(sick, "health_critical")
        wait_for(lambda: moved_off("chat-r2", sick), 120, "chat-r2 running off the failed NPU")
        moved_s = time.monotonic() - failed_at
        wait_for(lambda: replicas_running(client, "chat", 2), 60, "the surge removed")
        served = len(streaming.results)
        wait_for(lambda: len(streaming.results) >= served + 3, 30, "answers after the move")
    assert streaming.failures() == [], streaming.failures()[:3]
    assert moved_s < 60

    decision = Decision.objects.get(kind=DecisionKind.REPLICA_MOVED)
    assert (decision.deployment_name, decision.replica) == ("chat", "chat-r2")
    assert f"NPU {sick.npu_id} of {sick.node.name}, which failed (health_critical)" in decision.reason
    wait_for(lambda: Decision.objects.get(pk=decision.pk).outcome == "done", 30, "the move settled")
    rows = drained(len(streaming.results), timeout=30)
    assert any(row.instance.startswith("chat-r3/") for row in rows)  # the surge served during the move
