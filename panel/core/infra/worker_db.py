"""Database connections of the panel worker: kept across tasks, as Django keeps them across requests.

Celery's Django fixup closes every database connection before and after each task. At fleet size the
worker runs a hundred small ingest tasks a second (heartbeats, event batches), and on PostgreSQL each new
connection is a backend process forked and authenticated: bench/fleet.py measured about an eighth of the
worker's CPU in connecting, and as much again on the server. So the worker keeps its connections for
PANEL_WORKER_DB_CONN_MAX_AGE seconds (Django's CONN_MAX_AGE, here for the worker only: under ASGI the web
server must not hold persistent connections, Django's documentation says), and around each task does what
Django does around each request: drop a connection that broke or aged, and check one before its reuse
(CONN_HEALTH_CHECKS), so a database restart costs no task a failure.
"""

from celery import signals
from django.db import close_old_connections, connections

# The fixup still closes a thread's connections after this many of the process's tasks (its own setting,
# CELERY_DB_REUSE_MAX): rarely enough to cost nothing, often enough that nothing lives for ever.
FIXUP_REUSE_MAX = 10_000


def keep_connections(app, max_age: int) -> bool:
    """Keep the worker's database connections `max_age` seconds (0: Celery's default, one per task).
    Call before the worker starts. Returns whether connections are kept."""
    if max_age <= 0:
        return False
    for alias in connections:
        connections.settings[alias]["CONN_MAX_AGE"] = max_age
        connections.settings[alias]["CONN_HEALTH_CHECKS"] = True
    app.conf["CELERY_DB_REUSE_MAX"] = FIXUP_REUSE_MAX
    signals.task_prerun.connect(_around_task, weak=False, dispatch_uid="panel-worker-db-prerun")
    signals.task_postrun.connect(_around_task, weak=False, dispatch_uid="panel-worker-db-postrun")
    return True


def _around_task(**_):
    # Closes a connection whose errors left it unusable or that outlived CONN_MAX_AGE, and marks the others
    # for a health check before their next query.
    close_old_connections()
