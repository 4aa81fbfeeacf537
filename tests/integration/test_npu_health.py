"""NPU health end to end inside the panel: a metrics batch through the real ingest (Redis, the database) moves
an NPU's state by the policy, with its history, an audit entry and the signal; placement then refuses the
failed NPU; an admin's override through the API brings it back (and only an admin may)."""

import pytest

from tests.conftest import api_client_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]


@pytest.fixture
def node(a2, settings, _wired_to_redis):
    from panel.core.domain.choices import NodeStatus
    from panel.core.infra import panel_redis
    from panel.monitoring import services
    from panel.monitoring.metrics import store
    from panel.nodes.health.health_state import memory_key

    settings.REDIS_URL = _wired_to_redis
    panel_redis.client().delete(memory_key(a2.name))
    services.nodes.forget()
    a2.status, a2.transport = NodeStatus.ONLINE, "agent"
    a2.save()
    yield a2
    panel_redis.client().delete(memory_key(a2.name))
    # Its samples' live entries too: the database forgets a2, Redis would not, and a later test's fleet
    # summary counted its two NPUs beside its own node's eight.
    store.forget_node(a2.name)
    services.nodes.forget()


def ingest(node, *chips):
    from panel.monitoring.services import ingest_metrics
    from workers.contracts import utcnow

    host = {"cpu_pct": 3.0, "memory_used_mb": 1000.0, "memory_total_mb": 8000.0, "load1": 0.1}
    npus = [
        {
            "npu_id": i,
            "chip_id": 0,
            "logic_id": i,
            "name": "910B3",
            "hbm_used_mb": 3000.0,
            "hbm_total_mb": 65536.0,
        }
        | chip
        for i, chip in enumerate(chips)
    ]
    ingest_metrics({"node": node.name, "seq": 1, "samples": [{"time": utcnow(), "host": host, "npus": npus}]})


def place(node, user, count):
    from panel.deployments.placement.placement import resolve

    return resolve({"node": node.name, "npus": count}, user=user, facts={}, model_node_ids=[node.pk])


def test_a_critical_npu_is_failed_recorded_and_never_placed_on(node, alice):
    from panel.audit.models import AuditEntry
    from panel.nodes.models import Npu, NpuHealthChange
    from panel.nodes.signals import npu_health_changed

    heard = []
    npu_health_changed.connect(lambda sender, **kw: heard.append(kw), weak=False, dispatch_uid="test-heard")
    try:
        ingest(node, {"health": "Critical", "probe": {"error_codes": ["80E18402"]}}, {"health": "OK"})
    finally:
        npu_health_changed.disconnect(dispatch_uid="test-heard")

    failed = Npu.objects.get(node=node, npu_id=0)
    assert failed.health_state == "failed"
    assert failed.health_reason["signal"] == "fault_code"
    assert "80E18402" in failed.health_reason["detail"]
    assert Npu.objects.get(node=node, npu_id=1).health_state == "ok"
    change = NpuHealthChange.objects.get(node=node)
    assert (change.npu_name, change.old, change.new, change.user) == ("0/0", "ok", "failed", None)
    assert AuditEntry.objects.filter(action="npu.health_changed", target=f"{node.name} NPU 0/0").exists()
    assert [(h["old"], h["new"]) for h in heard] == [("ok", "failed")]

    assert place(node, alice, 1) == [{"node": node.name, "npus": [1]}]
    with pytest.raises(Exception, match="1 free NPUs; 2 are asked for"):
        place(node, alice, 2)


def test_the_state_holds_while_the_signal_stays_and_a_second_failure_cordons_the_node(node):
    from panel.nodes.models import Node, NpuHealthChange

    ingest(node, {"health": "Alarm"}, {"health": "OK"})
    ingest(node, {"health": "Alarm"}, {"health": "OK"})
    assert NpuHealthChange.objects.filter(node=node).count() == 1
    assert not Node.objects.get(pk=node.pk).cordoned
    ingest(node, {"health": "Alarm"}, {"health": "UNKNOWN", "probe": {"gone": True}})
    assert Node.objects.get(pk=node.pk).cordoned


def test_an_admin_marks_a_failed_npu_healthy_through_the_api_and_others_may_not(node, alice, bob, charlie):
    from panel.audit.models import AuditEntry
    from panel.nodes.models import Npu

    ingest(node, {"health": "Alarm"}, {"health": "OK"})
    url = f"/api/v1/nodes/{node.pk}/npu-health/"
    body = {"npu": "0/0", "state": "ok", "note": "reseated the card"}
    for user in (bob, charlie):
        assert api_client_for(user).post(url, body, format="json").status_code == 403
    answer = api_client_for(alice).post(url, body, format="json")
    assert answer.status_code == 200, answer.content
    assert answer.json()[0]["new"] == "ok"
    assert answer.json()[0]["user"] == "alice"
    assert Npu.objects.get(node=node, npu_id=0).health_state == "ok"
    entry = AuditEntry.objects.filter(action="npu.health_changed", actor_name="alice").get()
    assert entry.details["detail"] == "reseated the card"

    # The Alarm it still shows was forgiven; a new code is not.
    ingest(node, {"health": "Alarm"}, {"health": "OK"})
    assert Npu.objects.get(node=node, npu_id=0).health_state == "ok"
    ingest(node, {"health": "Alarm", "probe": {"error_codes": ["80E18005"]}}, {"health": "OK"})
    assert Npu.objects.get(node=node, npu_id=0).health_state == "failed"


def test_the_api_refuses_an_npu_the_node_does_not_have_and_a_state_it_does_not_know(node, alice):
    url = f"/api/v1/nodes/{node.pk}/npu-health/"
    client = api_client_for(alice)
    assert client.post(url, {"npu": "7/0", "state": "ok"}, format="json").status_code == 400
    assert client.post(url, {"npu": "0/0", "state": "fine"}, format="json").status_code == 400
    assert client.post(url, {"npu": "0; drop", "state": "ok"}, format="json").status_code == 400
    assert client.get(url).json() == []


def test_an_ecc_burst_on_a_sim_host_fails_its_npu_through_the_sampler_and_the_deployment_hears(
    node, sim_host, monkeypatch
):
    """The agent's real sampler and probe against a sim host, into the ingest: a burst of uncorrectable ECC
    errors fails the NPU and the deployment on it records the decision."""
    import subprocess
    import sys

    from panel.catalog.models import Model
    from panel.deployments.models import Decision, Deployment
    from panel.monitoring.services import ingest_metrics
    from panel.nodes.models import Npu
    from workers.contracts import MetricBatch
    from workers.health_probe import HealthProbe
    from workers.sampler import Sampler, run_command

    root, env = sim_host(name=node.name)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    for npu_id in range(2, 8):
        Npu.objects.create(node=node, npu_id=npu_id, logic_id=npu_id, name="910B3", hbm_total_mb=65536)
    deployment = Deployment.objects.create(name="on-npu-2", model=Model.objects.create(name="m-npu-2"))
    deployment.npus.add(Npu.objects.get(node=node, npu_id=2))
    sampler = Sampler(probe=HealthProbe(run_command, every_s=3600, background=False))

    def send():
        batch = MetricBatch(node=node.name, samples=[sampler.sample()], seq=1)
        ingest_metrics(batch.model_dump(mode="json"))

    send()
    fault = [
        sys.executable,
        "-m",
        "workers.sim",
        "fault",
        "--root",
        str(root),
        "--npu",
        "2",
        "--ecc-burst",
        "2",
    ]
    subprocess.run(fault, check=True, capture_output=True)
    send()  # the health word went Warning: this chip is probed at once, its ECC counters grew by 2

    failed = Npu.objects.get(node=node, npu_id=2)
    assert failed.health_state == "failed"
    assert failed.health_reason["signal"] == "ecc_double"
    decision = Decision.objects.get(deployment=deployment)
    assert decision.kind == "npu_failed"
    assert decision.reason_parts[0]["params"]["npu"] == "2/0"
    assert [npu.health_state for npu in Npu.objects.filter(node=node).exclude(npu_id=2)] == ["ok"] * 7


def test_states_come_back_from_the_database_when_redis_lost_the_memory_and_an_override_still_holds(
    node, alice
):
    from panel.core.infra import panel_redis
    from panel.nodes.health.health_state import memory_key
    from panel.nodes.models import Npu, NpuHealthChange

    ingest(node, {"health": "Alarm"}, {"health": "OK"})
    panel_redis.client().delete(memory_key(node.name))
    ingest(node, {"health": "Alarm"}, {"health": "OK"})  # still failed: no second change recorded
    assert NpuHealthChange.objects.filter(node=node).count() == 1
    panel_redis.client().delete(memory_key(node.name))
    url = f"/api/v1/nodes/{node.pk}/npu-health/"
    assert api_client_for(alice).post(url, {"npu": "0/0", "state": "ok"}, format="json").status_code == 200
    ingest(node, {"health": "Alarm"}, {"health": "OK"})
    assert Npu.objects.get(node=node, npu_id=0).health_state == "ok"


def test_npus_inventoried_after_the_first_samples_are_watched_from_the_next_sample(node):
    # Every panel start and every new node: samples come before the inventory has made the NPU rows. The
    # chips were looked up again only every RECHECK_S (30 s), and a Critical chip was failed that late.
    from panel.nodes.models import Npu
    from panel.nodes.services import apply_inventory

    rows = list(Npu.objects.filter(node=node).values("npu_id", "logic_id", "name", "hbm_total_mb"))
    Npu.objects.filter(node=node).delete()
    ingest(node, {"health": "OK"}, {"health": "OK"})  # a node not inventoried yet: nothing to keep
    apply_inventory(node, {"npus": [{**row, "chip_id": 0, "health": "OK"} for row in rows]})
    ingest(node, {"health": "Critical"}, {"health": "OK"})
    assert Npu.objects.get(node=node, npu_id=0).health_state == "failed"


def test_an_override_made_while_a_drain_is_under_way_is_not_undone_by_it(node, alice, monkeypatch):
    # The drain reads the node's memory, the admin marks the NPU healthy, the drain writes back what it had
    # read (still failed): the database said ok and Redis failed, so later faults were never recorded.
    from panel.nodes.health import health_state
    from panel.nodes.models import Npu

    ingest(node, {"health": "Alarm"}, {"health": "OK"})
    assert Npu.objects.get(node=node, npu_id=0).health_state == "failed"
    observe_node = health_state._observe_node
    overridden = []

    def override_meanwhile(entries, samples, now):
        if not overridden:
            health_state.override(Npu.objects.get(node=node, npu_id=0), "ok", alice)
            overridden.append(True)
        return observe_node(entries, samples, now)

    monkeypatch.setattr(health_state, "_observe_node", override_meanwhile)
    ingest(node, {"health": "Alarm", "probe": {"error_codes": []}}, {"health": "OK"})
    monkeypatch.setattr(health_state, "_observe_node", observe_node)
    assert Npu.objects.get(node=node, npu_id=0).health_state == "ok"

    ingest(node, {"health": "Alarm"}, {"health": "OK"})  # forgiven by the override, as before
    assert Npu.objects.get(node=node, npu_id=0).health_state == "ok"
    ingest(node, {"health": "Alarm", "probe": {"error_codes": ["80E18005"]}}, {"health": "OK"})
    assert Npu.objects.get(node=node, npu_id=0).health_state == "failed"  # a new signal still counts
