"""The panel worker keeps its database connection across tasks (panel/core/infra/worker_db.py), where Celery's
Django fixup alone opens one per task, and still drops one that broke or outlived its age.

A worker thread around each task runs the fixup's handlers and ours; the tests call them directly (the
process's Celery signals also reach the fixups other tests' in-process workers installed)."""

import time

import pytest
from celery import Celery, signals
from celery.fixups.django import DjangoWorkerFixup
from django.db import connection, connections

from panel.core.infra import worker_db

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def worker_app():
    saved = {alias: dict(connections.settings[alias]) for alias in connections}
    yield Celery("worker-db-test", set_as_current=False)
    signals.task_prerun.disconnect(dispatch_uid="panel-worker-db-prerun")
    signals.task_postrun.disconnect(dispatch_uid="panel-worker-db-postrun")
    for alias, values in saved.items():
        connections.settings[alias].clear()
        connections.settings[alias].update(values)


def one_task(fixup: DjangoWorkerFixup, kept: bool):
    """A task's round in a worker thread: the fixup's handler before and after it, ours when connections are
    kept, and a query in between; returns the connection the query used."""
    fixup.close_database()
    if kept:
        worker_db._around_task()
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
    used = connection.connection
    fixup.close_database()
    if kept:
        worker_db._around_task()
    return used


def test_a_worker_thread_reuses_its_connection_across_tasks(worker_app):
    assert worker_db.keep_connections(worker_app, 60)
    fixup = DjangoWorkerFixup(worker_app)  # made at worker start, after panel.celery configured the app
    first = one_task(fixup, kept=True)
    assert one_task(fixup, kept=True) is first
    assert connection.connection is first


def test_without_it_each_task_opens_a_connection_of_its_own(worker_app):
    fixup = DjangoWorkerFixup(worker_app)
    first = one_task(fixup, kept=False)
    assert connection.connection is None  # closed after the task
    assert one_task(fixup, kept=False) is not first


def test_a_connection_an_error_left_unusable_is_replaced_after_the_task(worker_app, monkeypatch):
    worker_db.keep_connections(worker_app, 60)
    fixup = DjangoWorkerFixup(worker_app)
    first = one_task(fixup, kept=True)
    connection.errors_occurred = True  # what Django records when a query raised a database error
    monkeypatch.setattr(connection, "is_usable", lambda: False)
    worker_db._around_task()
    assert connection.connection is None
    monkeypatch.undo()
    assert one_task(fixup, kept=True) is not first


def test_a_connection_older_than_its_age_is_replaced(worker_app):
    worker_db.keep_connections(worker_app, 60)
    fixup = DjangoWorkerFixup(worker_app)
    first = one_task(fixup, kept=True)
    connection.close_at = time.monotonic() - 1  # what CONN_MAX_AGE set at connect, now past
    worker_db._around_task()
    assert one_task(fixup, kept=True) is not first


def test_an_age_of_zero_keeps_celerys_default(worker_app):
    assert not worker_db.keep_connections(worker_app, 0)
    assert connections.settings["default"]["CONN_MAX_AGE"] == 0
    assert DjangoWorkerFixup(worker_app).db_reuse_max is None
