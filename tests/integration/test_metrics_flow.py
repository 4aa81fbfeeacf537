"""The metrics path with real parts: sampler on a simulated A2 host → metrics inbox (Redis) → the panel
worker's ingester → websocket, Redis ring buffer, minute table, history API, /metrics; and alerts raised,
resolved and acknowledged."""

import asyncio
import subprocess
import sys

import pytest
from channels.db import database_sync_to_async
from prometheus_client.parser import text_string_to_metric_families

import panel.monitoring.tasks  # noqa: F401  registers the metrics ingester with the in-process worker
from tests.conftest import api_client_for
from tests.integration.conftest import TEST_NODE
from tests.panel_sockets import connect_as

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]


@pytest.fixture
def node(celery_worker, settings, _wired_to_redis):
    from panel.monitoring import services
    from panel.monitoring.metrics import store
    from panel.nodes.models import Node

    settings.REDIS_URL = _wired_to_redis
    store.forget_node(TEST_NODE)
    store.client().delete(store.FLEET_DUE)
    services.nodes.forget(TEST_NODE)
    created = Node.objects.create(name=TEST_NODE, transport="agent")
    yield created
    store.forget_node(TEST_NODE)
    services.nodes.forget(TEST_NODE)


async def receive(communicator, predicate, timeout=15):
    """The first message matching `predicate`, skipping others. Live metrics frames may come several to a
    websocket message: those after the match wait on the communicator for the next call."""
    pending = communicator.__dict__.setdefault("pending_frames", [])
    async with asyncio.timeout(timeout):
        while True:
            if not pending:
                data = await communicator.receive_json_from(timeout=timeout)
                pending.extend(data if isinstance(data, list) else [data])
            message = pending.pop(0)
            if predicate(message):
                return message


def sample_and_send():
    """One tick of the agent's sampler against the sim host, sent through the inbox like the agent does."""
    from workers.contracts import MetricBatch, utcnow
    from workers.sampler import Sampler, send_metrics

    sample = Sampler().sample()
    send_metrics(MetricBatch(node=TEST_NODE, samples=[sample], seq=1, sent_at=utcnow()))
    return sample


def sim_fault(root, *args):
    subprocess.run([sys.executable, "-m", "workers.sim", "fault", "--root", str(root), *args], check=True)


async def test_a_sample_reaches_the_socket_the_ring_buffer_and_the_minute_table(node, alice, celery_worker):
    from panel.monitoring.metrics import store
    from panel.monitoring.metrics.history import downsample_node
    from panel.monitoring.models import HostMetricMinute, NpuMetricMinute

    communicator = await connect_as(alice, [f"node.{TEST_NODE}", "fleet"])
    sample = await database_sync_to_async(sample_and_send)()
    message = await receive(communicator, lambda m: m["type"] == "metrics")
    assert message["group"] == f"node.{TEST_NODE}"
    assert message["error"] is None
    assert [(n["npu_id"], n["logic_id"]) for n in message["npus"]] == [(i, i) for i in range(8)]
    assert message["npus"][0]["hbm_total_mb"] == 65536
    assert message["npus"][0]["deployment"] is None
    assert message["host"]["memory_total_mb"] > 0
    # The frame is what REST's latest message says, the panel's time of taking it in included.
    latest = await database_sync_to_async(store.read_latest)([TEST_NODE])
    assert {**message, "group": None} == {**latest[TEST_NODE], "group": None}
    assert 0 <= message["received"] - sample.time.timestamp() < 60
    summary = await receive(communicator, lambda m: m["type"] == "fleet.summary")
    assert summary["group"] == "fleet"
    assert summary["nodes"]["online"] == 1
    assert summary["live"]["npus"] == 8
    assert summary["live"]["memory_total_mb"] == 8 * 65536
    await communicator.disconnect()

    ring = await database_sync_to_async(store.read_ring)(TEST_NODE, 0)
    assert len(ring) == 1
    assert ring[0]["n"][0][:2] == [0, 0]
    epoch = sample.time.timestamp()
    written = await database_sync_to_async(downsample_node)(node.pk, TEST_NODE, epoch + 120)
    assert written == 9  # one host row and eight NPU rows for the one minute
    rows = await database_sync_to_async(list)(NpuMetricMinute.objects.filter(node=node).order_by("npu_id"))
    assert [r.npu_id for r in rows] == list(range(8))
    assert rows[0].hbm_used_mean == sample.npus[0].hbm_used_mb
    assert rows[0].samples == 1
    assert await database_sync_to_async(HostMetricMinute.objects.filter(node=node).count)() == 1
    # Running it again writes nothing twice.
    assert await database_sync_to_async(downsample_node)(node.pk, TEST_NODE, epoch + 120) == 0


def test_history_comes_from_the_ring_for_short_ranges_and_the_minute_table_for_long_ones(node, alice):
    from panel.monitoring.metrics.history import downsample_node
    from panel.monitoring.services import ingest_metrics
    from workers.contracts import MetricBatch
    from workers.sampler import Sampler

    sample = Sampler().sample()
    ingest_metrics(MetricBatch(node=TEST_NODE, samples=[sample], seq=1).model_dump(mode="json"))
    client = api_client_for(alice)

    short = client.get(f"/api/v1/nodes/{node.pk}/metrics/?since=5m&step=1").json()
    assert short["source"] == "ring"
    assert short["time"] == [int(sample.time.timestamp())]
    assert short["series"]["npu.0.0.hbm_used"] == [sample.npus[0].hbm_used_mb]
    assert "npu.0.0.util.max" not in short["series"]
    assert all(len(column) == len(short["time"]) for column in short["series"].values())

    downsample_node(node.pk, TEST_NODE, sample.time.timestamp() + 120)
    long = client.get(f"/api/v1/nodes/{node.pk}/metrics/?since=24h").json()
    assert long["source"] == "minutes"
    assert long["step"] % 60 == 0
    assert long["series"]["npu.7.0.temp"] == [sample.npus[7].temp_c]
    assert long["series"]["npu.7.0.temp.max"] == [sample.npus[7].temp_c]

    bad = client.get(f"/api/v1/nodes/{node.pk}/metrics/?since=yesterday")
    assert bad.status_code == 400
    assert "since" in bad.json()["errors"]


def test_prometheus_exposition_parses_with_npu_exporter_names_and_refuses_strangers(node, client, settings):
    from panel.monitoring.services import ingest_metrics
    from workers.contracts import MetricBatch
    from workers.sampler import Sampler

    ingest_metrics(MetricBatch(node=TEST_NODE, samples=[Sampler().sample()], seq=1).model_dump(mode="json"))
    response = client.get("/metrics")
    assert response.status_code == 200
    families = {f.name: f for f in text_string_to_metric_families(response.content.decode())}
    for name in (
        "npu_chip_info_utilization",
        "npu_chip_info_hbm_used_memory",
        "npu_chip_info_hbm_total_memory",
        "npu_chip_info_power",
        "npu_chip_info_temperature",
        "npu_chip_info_health_status",
        "machine_npu_nums",
        "ascend_panel_agents_online",
        "ascend_panel_operations",
        "ascend_panel_ingest_lag_seconds",
    ):
        assert name in families, name
    health = [s for s in families["npu_chip_info_health_status"].samples if s.labels["node"] == TEST_NODE]
    assert len(health) == 8
    assert {s.value for s in health} == {1.0}
    assert health[3].labels == {
        "id": "3",
        "chip_id": "0",
        "model_name": "910B3",
        "node": TEST_NODE,
        "logic_id": "3",
    }
    nums = [s for s in families["machine_npu_nums"].samples if s.labels["node"] == TEST_NODE]
    assert nums[0].value == 8

    assert client.get("/metrics", REMOTE_ADDR="10.9.9.9").status_code == 403
    settings.PANEL_METRICS_TOKEN = "scrape-secret"
    assert client.get("/metrics", REMOTE_ADDR="10.9.9.9").status_code == 401
    assert (
        client.get("/metrics", REMOTE_ADDR="10.9.9.9", HTTP_AUTHORIZATION="Bearer wrong").status_code == 401
    )
    allowed = client.get("/metrics", REMOTE_ADDR="10.9.9.9", HTTP_AUTHORIZATION="Bearer scrape-secret")
    assert allowed.status_code == 200


async def test_an_injected_fault_raises_an_alert_and_clearing_it_resolves_it(node, alice, celery_worker):
    from panel.monitoring.models import Alert

    communicator = await connect_as(alice, ["alerts"])
    await database_sync_to_async(sim_fault)(celery_worker.sim_root, "--npu", "3", "--health", "Alarm")
    await database_sync_to_async(sample_and_send)()
    raised = await receive(communicator, lambda m: m["type"] == "alert" and m["event"] == "raised")
    assert raised["alert"]["kind"] == "npu_health"
    assert raised["alert"]["npu_id"] == 3
    assert raised["alert"]["severity"] == "critical"
    assert raised["open_unacknowledged"] == 1
    alert = await database_sync_to_async(Alert.objects.get)(node=node)
    assert alert.resolved_at is None

    # The same condition in the next sample changes nothing.
    await database_sync_to_async(sample_and_send)()
    await database_sync_to_async(sim_fault)(celery_worker.sim_root, "--npu", "3", "--health", "OK")
    await database_sync_to_async(sample_and_send)()
    resolved = await receive(communicator, lambda m: m["type"] == "alert" and m["event"] == "resolved")
    assert resolved["alert"]["id"] == alert.pk
    assert resolved["open_unacknowledged"] == 0
    await communicator.disconnect()
    await database_sync_to_async(alert.refresh_from_db)()
    assert alert.resolved_at is not None
    assert await database_sync_to_async(Alert.objects.filter(node=node).count)() == 1


def test_a_driver_failure_is_shown_on_the_node_and_raised_as_an_alert(node, celery_worker):
    from panel.monitoring.metrics import store
    from panel.monitoring.models import Alert
    from panel.monitoring.services import ingest_metrics
    from workers.contracts import MetricBatch
    from workers.sampler import Sampler

    sim_fault(celery_worker.sim_root, "--driver-unloaded")
    message = ingest_metrics(
        MetricBatch(node=TEST_NODE, samples=[Sampler().sample()], seq=1).model_dump(mode="json")
    )
    assert "-8005" in message["error"]
    assert "-8005" in store.read_latest([TEST_NODE])[TEST_NODE]["error"]
    assert Alert.objects.open().get(node=node).kind == "sampling_error"


def test_acknowledging_needs_an_operator(node, bob, charlie):
    from panel.monitoring.alerting.alerts import node_went_offline
    from panel.monitoring.models import Alert

    node_went_offline(node)
    alert = Alert.objects.open().get(node=node)
    assert alert.kind == "agent_offline"
    assert api_client_for(charlie).post(f"/api/v1/alerts/{alert.pk}/acknowledge/").status_code == 403
    response = api_client_for(bob).post(f"/api/v1/alerts/{alert.pk}/acknowledge/")
    assert response.status_code == 200
    assert response.json()["acknowledged_by"] == "bob"
    assert response.json()["resolved_at"] is None


def test_an_agent_going_silent_raises_offline_and_its_next_heartbeat_resolves_it(node):
    from datetime import timedelta

    from django.utils import timezone

    from panel.monitoring.models import Alert
    from panel.nodes.services import mark_silent_nodes_offline, record_heartbeat

    node.status = "online"
    node.last_heartbeat = timezone.now() - timedelta(minutes=5)
    node.save()
    assert mark_silent_nodes_offline() == [TEST_NODE]
    assert Alert.objects.open().get(node=node).kind == "agent_offline"
    record_heartbeat(
        {"node": TEST_NODE, "time": timezone.now().isoformat(), "agent_version": "t", "interval_s": 5}
    )
    assert not Alert.objects.open().filter(node=node).exists()


def test_the_alerts_page_lists_open_alerts_with_an_acknowledge_button_for_operators(
    node, client, bob, charlie
):
    from panel.monitoring.alerting.alerts import node_went_offline

    node_went_offline(node)
    client.force_login(bob)
    page = client.get("/alerts/").content.decode()
    assert "stopped sending heartbeats" in page
    assert "Acknowledge" in page
    assert "data-alert-banner" in page
    client.force_login(charlie)
    assert "Acknowledge</button>" not in client.get("/alerts/").content.decode()
