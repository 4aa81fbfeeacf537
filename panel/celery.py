"""The panel worker: the shared Celery app, with Django set up and the panel's tasks registered.

celery -A panel.celery worker -Q panel     # the panel's tasks; also ingests agents' events, heartbeats
                                           # (queue ingest) and metrics (panel.nodes.ingest_guard)
celery -A panel.celery beat                # the sweeps (offline nodes, reconcile, downsampling)
"""

import os

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "panel.settings")
django.setup()

from django.conf import settings  # noqa: E402

from panel.core.worker_db import keep_connections  # noqa: E402
from workers.celery_app import app, ssl_options  # noqa: E402

keep_connections(app, settings.PANEL_WORKER_DB_CONN_MAX_AGE)
app.conf.broker_url = settings.CELERY_BROKER_URL
app.conf.broker_use_ssl = ssl_options(settings.CELERY_BROKER_URL, settings.PANEL_BROKER_CA_FILE)
app.conf.beat_schedule = {
    "mark-silent-nodes-offline": {"task": "panel.mark_silent_nodes_offline", "schedule": 2.0},
    # Sends what the broker did not take, ends operations whose agent is gone, re-sends lost attempts.
    "reap-operations": {"task": "panel.reap_operations", "schedule": settings.PANEL_REAP_S},
    # Metrics and liveness of SSH nodes: due ones get a sample task on the central agent's queue.
    "dispatch-ssh-probes": {"task": "panel.dispatch_ssh_probes", "schedule": 1.0},
    "monitoring-downsample": {"task": "panel.monitoring.downsample", "schedule": 60.0},
    "monitoring-prune": {"task": "panel.monitoring.prune", "schedule": 3600.0},
    "audit-prune": {"task": "panel.audit.prune", "schedule": 86400.0},
    "idempotency-prune": {"task": "panel.accounts.prune_idempotent_answers", "schedule": 3600.0},
    # Gateway usage: Redis list → rows and hourly roll-ups; raw rows and roll-ups pruned daily.
    "gateway-drain-usage": {
        "task": "panel.gateway.drain_usage",
        "schedule": settings.PANEL_GATEWAY_USAGE_DRAIN_S,
    },
    "gateway-prune-usage": {"task": "panel.gateway.prune_usage", "schedule": 86400.0},
    "reconcile-deployments": {
        "task": "panel.reconcile_deployments",
        "schedule": settings.PANEL_DEPLOY_RECONCILE_S,
    },
}
# Every beat process uses the leader lock (panel/beat.py): run two for failover, one of them ticks.
app.conf.beat_scheduler = "panel.beat:LeaderScheduler"

import panel.accounts.tasks  # noqa: E402,F401
import panel.audit.tasks  # noqa: E402,F401
import panel.deployments.tasks  # noqa: E402,F401
import panel.gateway.tasks  # noqa: E402,F401
import panel.monitoring.tasks  # noqa: E402,F401
import panel.nodes.tasks  # noqa: E402,F401
import panel.operations.tasks  # noqa: E402,F401

__all__ = ["app"]
