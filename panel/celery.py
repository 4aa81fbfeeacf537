"""The panel worker: the shared Celery app, with Django set up and the panel's tasks registered.

celery -A panel.celery worker -Q panel     # the panel's tasks; also ingests agents' events, heartbeats
                                           # (queue ingest) and metrics (panel.nodes.agents.ingest_guard)
celery -A panel.celery beat                # the sweeps (offline nodes, reconcile, downsampling)

Importing this module makes the process a panel worker: the shared app's broker, its options and the
database connections' lifetime change. Tests never import it (they would lose their session's broker prefix
and reach other test processes' queues); what they check of it lives elsewhere (panel.beat.beat_schedule).
"""

import os

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "panel.settings")
django.setup()

from django.conf import settings  # noqa: E402

from panel.beat import beat_schedule  # noqa: E402
from panel.core.infra.heap import freeze_once_worker_is_ready  # noqa: E402
from panel.core.infra.worker_db import keep_connections  # noqa: E402
from workers.celery_app import app, ssl_options, transport_options  # noqa: E402

keep_connections(app, settings.PANEL_WORKER_DB_CONN_MAX_AGE)
freeze_once_worker_is_ready()
app.conf.broker_url = settings.CELERY_BROKER_URL
app.conf.broker_transport_options = transport_options(settings.CELERY_BROKER_URL)
app.conf.broker_use_ssl = ssl_options(settings.CELERY_BROKER_URL, settings.PANEL_BROKER_CA_FILE)
app.conf.beat_schedule = beat_schedule()
# Every beat process uses the leader lock (panel/beat.py): run two for failover, one of them ticks.
app.conf.beat_scheduler = "panel.beat:LeaderScheduler"

import panel.accounts.tasks  # noqa: E402
import panel.audit.tasks  # noqa: E402
import panel.deployments.tasks  # noqa: E402
import panel.gateway.tasks  # noqa: E402
import panel.monitoring.tasks  # noqa: E402
import panel.nodes.tasks  # noqa: E402
import panel.operations.tasks  # noqa: E402,F401

__all__ = ["app"]
