"""What the gateway adds to the apps below it (connected in GatewayConfig.ready()): its cache invalidation
(panel.gateway.signals), its figures on /metrics, its answer to "does the gateway still send this
deployment requests" before a stop goes out, and the excluded instances written the moment an NPU's health
changes (panel.gateway.instances.failover)."""

from django.db import transaction

from panel.deployments.rollouts.drain import SERVING_CHECKS
from panel.gateway import signals
from panel.gateway.accounting import metrics
from panel.gateway.instances import failover, pool
from panel.monitoring.metrics.prometheus import EXTRA_COLLECTORS
from panel.nodes.signals import node_offline, node_online, npu_health_changed


def connect() -> None:
    signals.connect()
    if metrics.collect not in EXTRA_COLLECTORS:
        EXTRA_COLLECTORS.append(metrics.collect)
    if pool.serves not in SERVING_CHECKS:
        SERVING_CHECKS.append(pool.serves)
    npu_health_changed.connect(_npu_health_changed, dispatch_uid="gateway-npu-health")
    node_offline.connect(_node_status_changed, dispatch_uid="gateway-node-offline")
    node_online.connect(_node_status_changed, dispatch_uid="gateway-node-online")


def _npu_health_changed(sender, npu, old, new, **kwargs):
    """Exclude (or let back) the instances on the NPU at once, not after a probe: once the change commits."""
    transaction.on_commit(failover.publish)


def _node_status_changed(sender, node, **kwargs):
    """A node that went silent: its instances out at once (not after the 10 s publish); back: let in."""
    transaction.on_commit(failover.publish)
