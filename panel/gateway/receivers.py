"""What the gateway adds to the apps below it (connected in GatewayConfig.ready()): its cache invalidation
(panel.gateway.signals), its figures on /metrics, and its answer to "does the gateway still send this
deployment requests" before a stop goes out."""

from panel.deployments.drain import SERVING_CHECKS
from panel.gateway import metrics, pool, signals
from panel.monitoring.prometheus import EXTRA_COLLECTORS


def connect() -> None:
    signals.connect()
    if metrics.collect not in EXTRA_COLLECTORS:
        EXTRA_COLLECTORS.append(metrics.collect)
    if pool.serves not in SERVING_CHECKS:
        SERVING_CHECKS.append(pool.serves)
