"""The panel worker's side of the ingest exchange: consume the ingest queue beside the panel's own, and
run nothing but ingest tasks from it.

A node's broker user may publish to the ingest exchange only, but may put any task name in what it
publishes there; the panel's own tasks (sweeps, pruning, webhooks) come through the `panel` exchange, which
nodes cannot write to. So a message that arrived through the ingest exchange and names any task outside
INGEST_TASKS is acknowledged, logged and counted (`panel_rejected_messages_total{kind="ingest-task"}`),
never run. On RabbitMQ the exchange a message came through is the broker's word, not the sender's.
"""

import logging

from celery import bootsteps

from panel.nodes.broker_admin import BrokerAdminError, bound_ingest_queue
from panel.nodes.trust import refuse
from workers.task_names import INGEST_TASKS, PANEL_QUEUE
from workers.topology import INGEST_EXCHANGE, declare, ingest_queue, is_amqp, panel_topology

log = logging.getLogger(__name__)


def came_through_ingest(message) -> bool:
    return (message.delivery_info or {}).get("exchange") == INGEST_EXCHANGE


def guarded(task_name: str, strategy):
    """`strategy` (Celery's per-task message handler), refusing the message when it came through ingest."""

    def handle(message, body, ack, reject, callbacks, **options):
        if came_through_ingest(message):
            sender = (message.headers or {}).get("origin") or "?"
            refuse("ingest-task", sender, f"task {task_name!r} is not one agents may send the panel")
            message.ack()
            return None
        return strategy(message, body, ack, reject, callbacks, **options)

    return handle


class IngestQueueStep(bootsteps.StartStopStep):
    """A worker serving the panel queue serves the ingest queue too; on RabbitMQ it declares the panel's
    topology first (exchanges, the ingest and metrics queues), which only the panel's user may do, and
    bounds the ingest queue (broker_admin.bound_ingest_queue)."""

    label = "ingest queue"

    def create(self, worker):
        queues = worker.app.amqp.queues
        if PANEL_QUEUE not in queues.consume_from:
            return None
        if is_amqp(worker.app.conf.broker_url):
            with worker.app.connection_for_write() as connection:
                declare(connection, panel_topology())
            try:
                bound_ingest_queue()
            except BrokerAdminError as error:  # the worker still ingests; the bound waits for its next start
                log.warning("the ingest queue is not bounded: %s", error)
        queues.select_add(ingest_queue())
        return None


class IngestGuardStep(bootsteps.StartStopStep):
    """Wraps every non-ingest task's handler once the consumer has (re)built them."""

    label = "ingest guard"
    requires = ("celery.worker.consumer.tasks:Tasks",)

    def start(self, consumer):
        for name, strategy in list(consumer.strategies.items()):
            if name not in INGEST_TASKS:
                consumer.strategies[name] = guarded(name, strategy)


def install(app) -> None:
    app.steps["worker"].add(IngestQueueStep)
    app.steps["consumer"].add(IngestGuardStep)
