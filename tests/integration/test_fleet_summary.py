"""The fleet summary counts in the database what a slow walk over every node and NPU row counts, treats SSH
nodes as SSH nodes (a silent SSH node shows offline at once), keeps its query count whatever the fleet's
size, and sums the live figures the ingest keeps; the sampling interval goes to agents only."""

import random
import time
from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from panel.catalog.models import Model
from panel.core.domain.choices import NodeStatus
from panel.deployments.models import Deployment
from panel.monitoring.metrics import store
from panel.monitoring.metrics.fleet import FIGURES_FRESH_S, UNHEALTHY, fleet_summary, live_figures
from panel.monitoring.models import Alert, AlertKind, AlertSeverity
from panel.monitoring.services import ingest_batches, set_metrics_interval
from panel.nodes.models import Node, Npu
from workers.broker import broker_key, broker_redis
from workers.contracts import HostSample, MetricBatch, MetricSample, NpuSample
from workers.task_names import node_queue

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("_wired_to_redis")]

CHIPS = ["910B3", "910B4", "310P3", ""]
HEALTHS = ["OK", "OK", "OK", "Warning", "Alarm", "Critical", "Unknown"]


def ssh_node(name: str, silent_for: timedelta, **fields) -> Node:
    return Node.objects.create(
        name=name,
        transport="ssh",
        status=NodeStatus.ONLINE,
        ssh_host_key_fingerprint="SHA256:abc",
        last_heartbeat=timezone.now() - silent_for,
        **fields,
    )


def mixed_fleet(count: int, seed: int = 7) -> None:
    """Nodes in every state (agents heard lately or not, with their own intervals; never heard; SSH nodes
    watched or not), cordoned or not; NPUs of several chip types and healths; some held by deployments;
    open, acknowledged and resolved alerts of several kinds."""
    rng = random.Random(seed)
    now = timezone.now()
    model = Model.objects.create(name=f"fleet-model-{seed}")
    for index in range(count):
        interval = rng.choice([1.0, 5.0, 5.0, 30.0])
        kind = rng.choice(["heard", "heard", "silent", "never", "ssh-unwatched", "ssh-watched"])
        fields = {
            "name": f"mix-{seed}-{index:03}",
            "cordoned": rng.random() < 0.2,
            "heartbeat_interval": interval,
        }
        if kind == "heard":
            node = Node.objects.create(
                **fields, status="online", last_heartbeat=now - timedelta(seconds=interval)
            )
        elif kind == "silent":
            node = Node.objects.create(
                **fields, status="online", last_heartbeat=now - timedelta(seconds=interval * 4)
            )
        elif kind == "never":
            node = Node.objects.create(**fields, status=rng.choice(["unknown", "offline"]))
        elif kind == "ssh-unwatched":
            node = Node.objects.create(**fields, transport="ssh", status=rng.choice(["online", "unknown"]))
        else:
            node = ssh_node(fields.pop("name"), timedelta(seconds=rng.choice([1, 3600])), **fields)
        chip = rng.choice(CHIPS)
        npus = Npu.objects.bulk_create(
            [
                Npu(
                    node=node,
                    npu_id=n,
                    chip_id=0,
                    name=chip,
                    health=rng.choice(HEALTHS),
                    hbm_total_mb=65536 if chip.startswith("910") else None,
                    memory_total_mb=None if chip.startswith("910") else rng.choice([None, 44280]),
                )
                for n in range(rng.choice([0, 4, 8]))
            ]
        )
        if npus and rng.random() < 0.5:
            deployment = Deployment.objects.create(name=f"dep-{seed}-{index:03}", model=model)
            deployment.npus.set(rng.sample(npus, rng.randint(1, len(npus))))
        for npu in rng.sample(npus, min(len(npus), 2)):
            Alert.objects.create(
                node=node,
                key=f"{AlertKind.NPU_HEALTH}:{npu.npu_id}:0",
                kind=rng.choice([AlertKind.NPU_HEALTH, AlertKind.NPU_TEMPERATURE]),
                severity=rng.choice(AlertSeverity.values),
                npu_id=npu.npu_id,
                chip_id=0,
                message="seen",
                first_seen=now,
                last_seen=now,
                acknowledged_at=now if rng.random() < 0.3 else None,
                resolved_at=now if rng.random() < 0.4 else None,
            )


def counted_the_slow_way() -> dict:
    """What the summary must say, from every row in Python (what the dashboard did before)."""
    nodes = list(Node.objects.all())
    status = {node.pk: node.effective_status for node in nodes}
    cordoned = {node.pk: node.cordoned for node in nodes}
    open_alerts = list(Alert.objects.filter(resolved_at__isnull=True))
    health_alerts = {(a.node_id, a.npu_id, a.chip_id) for a in open_alerts if a.kind == AlertKind.NPU_HEALTH}
    chips = {}
    for npu in Npu.objects.all():
        chip = chips.setdefault(
            npu.name,
            {
                "chip": npu.name,
                "total": 0,
                "free": 0,
                "busy": 0,
                "unhealthy": 0,
                "offline": 0,
                "memory_total_mb": 0,
            },
        )
        held = npu.deployments.exists()
        unhealthy = npu.health in UNHEALTHY or (npu.node_id, npu.npu_id, npu.chip_id) in health_alerts
        online = status[npu.node_id] == NodeStatus.ONLINE
        chip["total"] += 1
        chip["busy"] += held
        chip["unhealthy"] += unhealthy
        chip["offline"] += not online
        chip["free"] += online and not (held or unhealthy or cordoned[npu.node_id])
        chip["memory_total_mb"] += npu.device_memory_mb or 0
    statuses = list(status.values())
    return {
        "nodes": {
            "total": len(nodes),
            "online": statuses.count("online"),
            "offline": statuses.count("offline"),
            "unknown": statuses.count("unknown"),
            "cordoned": sum(cordoned.values()),
        },
        "chips": [chips[name] for name in sorted(chips)],
        "alerts": {
            "open": len(open_alerts),
            "unacknowledged": sum(1 for a in open_alerts if a.acknowledged_at is None),
            "critical": sum(1 for a in open_alerts if a.severity == AlertSeverity.CRITICAL),
        },
    }


def test_the_summary_counts_what_a_walk_over_every_row_counts():
    mixed_fleet(60)
    summary = fleet_summary()
    expected = counted_the_slow_way()
    assert summary["type"] == "fleet.summary"
    assert summary["nodes"] == expected["nodes"]
    assert summary["chips"] == expected["chips"]
    assert summary["alerts"] == expected["alerts"]
    assert summary["npus"]["total"] == Npu.objects.count()
    assert summary["npus"]["busy"] == sum(chip["busy"] for chip in expected["chips"])
    # The mixed fleet has every kind of count, so none of the comparisons above is 0 == 0 by accident.
    assert all(summary["nodes"][state] for state in ("online", "offline", "unknown", "cordoned"))
    assert all(summary["npus"][kind] for kind in ("free", "busy", "unhealthy", "offline"))


def test_the_summary_makes_the_same_queries_for_ten_nodes_and_a_hundred():
    mixed_fleet(10, seed=1)
    with CaptureQueriesContext(connection) as few:
        fleet_summary()
    mixed_fleet(90, seed=2)
    with CaptureQueriesContext(connection) as many:
        fleet_summary()
    assert len(many) == len(few) <= 6


def test_a_silent_ssh_node_is_offline_in_the_fleet_summary_before_the_sweeper_runs():
    ssh_node("ssh-quiet", silent_for=timedelta(hours=1))
    ssh_node("ssh-talking", silent_for=timedelta(seconds=1))
    Node.objects.create(name="ssh-unconfirmed", transport="ssh", status=NodeStatus.UNKNOWN)
    counts = fleet_summary()["nodes"]
    assert (counts["online"], counts["offline"], counts["unknown"]) == (1, 1, 1)
    assert Node.objects.with_live_status().get(name="ssh-quiet").live_status == NodeStatus.OFFLINE


def batch(node: str, utils: list[float | None], power: float | None = 100.0) -> MetricBatch:
    npus = [
        NpuSample(npu_id=i, chip_id=0, aicore_pct=util, power_w=power, hbm_used_mb=1000.0, hbm_total_mb=65536)
        for i, util in enumerate(utils)
    ]
    host = HostSample(cpu_pct=1, memory_used_mb=1, memory_total_mb=2, load1=0)
    return MetricBatch(node=node, samples=[MetricSample(time=datetime.now(UTC), host=host, npus=npus)], seq=1)


def test_live_figures_sum_the_newest_sample_of_each_node_heard_from_lately():
    from panel.monitoring.services import nodes as node_cache

    names = ["live-a", "live-b", "live-gone"]
    for name in names:
        Node.objects.create(name=name, transport="agent")
        store.forget_node(name)
    store.client().delete(store.FIGURES)
    node_cache.forget()
    try:
        ingest_batches([batch("live-a", [10, 20, None]), batch("live-b", [60], power=None)])
        ingest_batches([batch("live-gone", [99, 99])])
        assert live_figures()["nodes"] == 3
        assert live_figures(time.time() + FIGURES_FRESH_S + 1)["nodes"] == 0  # heard from too long ago
        # live-gone's line is older than a latest value lives: left out, and dropped from the hash.
        stale = store.client().hget(store.FIGURES, "live-gone").replace('"t":', '"t":1,"was":')
        store.client().hset(store.FIGURES, "live-gone", stale)
        figures = live_figures()
        assert figures["nodes"] == 2
        assert figures["npus"] == 4
        assert figures["util_mean"] == 30.0  # (10 + 20 + 60) / 3: a chip without a reading is not a 0
        assert figures["memory_used_mb"] == 4000
        assert figures["memory_total_mb"] == 4 * 65536
        assert figures["power_w"] == 300.0
        assert store.client().hget(store.FIGURES, "live-gone") is None  # dropped once older than the latest
    finally:
        for name in names:
            store.forget_node(name)
        node_cache.forget()


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
