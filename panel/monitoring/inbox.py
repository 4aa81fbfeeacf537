"""The panel worker's metrics ingester: one thread that drains the metrics inbox (workers.metrics_inbox)
and ingests each batch. It runs inside every panel worker (a Celery bootstep), so `celery -A panel.celery
worker -Q panel` is all a deployment runs; several panel workers share the inbox, each batch goes to one.
"""

import logging
import threading

from celery import bootsteps
from django.db import close_old_connections

from workers import metrics_inbox
from workers.contracts import utcnow
from workers.task_names import PANEL_QUEUE

log = logging.getLogger(__name__)

WAIT_S = 1.0  # how long one blocking pop waits, so a stop request is seen within about this long
RETRY_S = 2.0  # pause after Redis failed, before trying again


class MetricsIngester:
    """Drains the inbox until stopped. Nothing in one bad batch stops the others."""

    def __init__(self):
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.ingested = 0

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="metrics-ingester", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                raws = metrics_inbox.take(WAIT_S)
            except Exception:  # Redis restarting or unreachable: the agents' batches wait in the inbox
                log.exception("metrics inbox unreachable; retrying in %s s", RETRY_S)
                self._stop.wait(RETRY_S)
                continue
            if raws:
                close_old_connections()  # what Celery does around each task: drop broken or aged connections
                self.ingest_all(raws)

    def ingest_all(self, raws: list[bytes]) -> None:
        from panel.monitoring.services import ingest_metrics

        now = utcnow()
        for raw in raws:
            data = metrics_inbox.decode(raw)
            if data is None:
                log.warning("metrics inbox held something that is not a JSON object; dropped")
                continue
            if metrics_inbox.is_stale(data, now):
                continue
            try:
                ingest_metrics(data)
            except Exception:
                log.exception("metrics batch from %r not ingested", data.get("node"))
            self.ingested += 1


class MetricsIngestStep(bootsteps.StartStopStep):
    """Starts the ingester in workers that serve the panel queue (agents' workers share the Celery app)."""

    label = "metrics ingester"

    def create(self, worker):
        if PANEL_QUEUE in worker.app.amqp.queues.consume_from:
            return MetricsIngester()
        return None
