"""An SSH node: the central agent (queue ssh-runner) inventories a simulated host over SSH to a loopback
sshd, and the Node and Npu rows equal those the local runner produces for the same host."""

import asyncio
import os

import pytest
from channels.db import database_sync_to_async

import tests.sshd
from tests.e2e.conftest import ssh_node_for, wait_finished
from tests.integration.conftest import TEST_NODE
from workers.hosts import fetch_host_key_fingerprint

sshd_server = tests.sshd.sshd_server
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(180), pytest.mark.ssh]

NPU_FIELDS = ("npu_id", "chip_id", "logic_id", "name", "health", "hbm_total_mb", "bus_id", "numa_node")
STABLE_FACTS = ("os", "kernel", "arch", "cpu", "numa_nodes", "hugepages")


def rows(node):
    return [tuple(getattr(npu, f) for f in NPU_FIELDS) for npu in node.npus.all()]


async def test_inventory_over_ssh_gives_the_same_rows_as_the_local_runner(
    worker_with_central_agent, sshd_server, alice
):
    from panel.nodes.agents.ssh import sealed_credentials
    from panel.nodes.models import Node
    from panel.operations.node_operations import confirm_host_key, start_inventory

    root = worker_with_central_agent.sim_root
    local = await database_sync_to_async(Node.objects.create)(name=TEST_NODE, transport="agent")
    await wait_finished(await database_sync_to_async(start_inventory)(local, user=alice))

    remote = await database_sync_to_async(Node.objects.create)(
        name="ssh-sim",
        transport="ssh",
        address=sshd_server.host,
        ssh_port=sshd_server.port,
        ssh_username=sshd_server.username,
        ssh_secret=await database_sync_to_async(sealed_credentials)(client_key=sshd_server.client_key_pem),
        # The sim's tools must come first on the remote PATH; its files live under its root.
        ssh_env={"PATH": f"{root / 'bin'}{os.pathsep}{os.environ['PATH']}"},
        ssh_host_root=str(root),
        ssh_ascend_root=str(root / "usr" / "local" / "Ascend"),
    )
    shown = await fetch_host_key_fingerprint(sshd_server.host, sshd_server.port)  # what the admin compares
    operation = await database_sync_to_async(confirm_host_key)(
        remote, shown, user=alice
    )  # pin, then inventory
    await wait_finished(operation)

    local = await database_sync_to_async(Node.objects.prefetch_related("npus").get)(pk=local.pk)
    remote = await database_sync_to_async(Node.objects.prefetch_related("npus").get)(pk=remote.pk)
    assert remote.ssh_host_key_fingerprint == shown
    assert rows(remote) == rows(local)
    assert len(rows(remote)) == 8
    assert [r[2] for r in rows(remote)] == list(range(8))  # logic ids
    assert {r[-1] for r in rows(remote)} == {0, 1, 2, 3}  # NUMA nodes
    assert remote.versions == local.versions
    assert {k: remote.facts.get(k) for k in STABLE_FACTS} == {k: local.facts.get(k) for k in STABLE_FACTS}
    # Live readings (power, temperature) differ between two runs; the table's shape does not.
    assert remote.npu_smi_info.splitlines()[:3] == local.npu_smi_info.splitlines()[:3]


def test_a_host_key_that_changed_before_confirmation_is_not_stored(sshd_server):
    from django.core.exceptions import ValidationError

    from panel.nodes.agents.ssh import sealed_credentials
    from panel.nodes.models import Node
    from panel.operations.node_operations import confirm_host_key

    node = Node.objects.create(
        name="ssh-other",
        transport="ssh",
        address=sshd_server.host,
        ssh_port=sshd_server.port,
        ssh_username=sshd_server.username,
        ssh_secret=sealed_credentials(password="x"),
    )
    with pytest.raises(ValidationError, match="nothing was stored"):
        confirm_host_key(node, "SHA256:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA")
    node.refresh_from_db()
    assert node.ssh_host_key_fingerprint == ""


restartable_sshd = tests.sshd.restartable_sshd


def probe_round(node):
    """What beat does every second (dispatch the due SSH probes) and every two (sweep silent nodes), then the
    node as the panel shows it and its latest metrics."""
    from panel.monitoring.metrics import store
    from panel.monitoring.metrics.ssh_probes import dispatch_ssh_probes
    from panel.nodes.services import mark_silent_nodes_offline

    dispatch_ssh_probes()
    mark_silent_nodes_offline()
    node.refresh_from_db()
    return node.status, node.effective_status, store.read_latest([node.name]).get(node.name)


async def poll(node, until, what, timeout=90):
    for _ in range(int(timeout / 0.5)):
        status, effective, latest = await database_sync_to_async(probe_round)(node)
        if until(status, effective, latest):
            return latest
        await asyncio.sleep(0.5)
    raise AssertionError(f"{node.name}: no {what} within {timeout}s (status {status}, shown {effective})")


async def test_an_ssh_node_sends_metrics_goes_offline_with_its_host_and_comes_back(
    worker_with_central_agent, restartable_sshd, settings, alice
):
    from panel.monitoring import services
    from panel.monitoring.metrics import store
    from panel.operations.node_operations import confirm_host_key

    # Two-second liveness intervals: offline after six silent seconds (the default is 3 x 5 s).
    settings.PANEL_HEARTBEAT_INTERVAL = 2.0
    sshd = restartable_sshd.server
    node = await database_sync_to_async(ssh_node_for)(sshd, worker_with_central_agent.sim_root, "ssh-watched")
    await database_sync_to_async(store.forget_node)(node.name)
    services.nodes.forget()  # the ingest's node cache learns of the new node now, not in ten seconds
    shown = await fetch_host_key_fingerprint(sshd.host, sshd.port)
    await wait_finished(await database_sync_to_async(confirm_host_key)(node, shown, user=alice))
    try:
        latest = await poll(node, lambda s, e, latest: latest and len(latest["npus"]) == 8, "NPU metrics")
        assert latest["error"] is None
        assert [npu["npu_id"] for npu in latest["npus"]] == list(range(8))
        assert all(npu["hbm_total_mb"] and npu["logic_id"] is not None for npu in latest["npus"])
        assert latest["host"]["memory_total_mb"] > 0
        assert 0 <= latest["host"]["cpu_pct"] <= 100
        await poll(node, lambda s, e, _: len(store.read_ring(node.name, 0)) >= 3, "three samples in the ring")
        ring = await database_sync_to_async(store.read_ring)(node.name, 0)
        assert all(len(sample["n"]) == 8 for sample in ring)
        assert (await database_sync_to_async(lambda: node.heartbeat_interval)()) == 2.0

        restartable_sshd.stop()
        await poll(node, lambda s, e, _: s == e == "offline", "offline after sshd stopped")

        restartable_sshd.start()
        went_offline_at = latest["time"]
        latest = await poll(
            node,
            lambda s, e, latest: s == e == "online" and latest["time"] > went_offline_at,
            "online with fresh metrics after sshd returned",
        )
        assert len(latest["npus"]) == 8
    finally:
        await database_sync_to_async(store.forget_node)(node.name)
