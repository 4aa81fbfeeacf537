"""The Celery app shared by agents and the panel worker. Configured from the environment only, so an agent
needs nothing but broker access: its own RabbitMQ user in the fleet setup (workers.topology), or make run's
embedded Redis on a single machine."""

import os
import ssl
from urllib.parse import urlsplit

from celery import Celery

from workers.task_names import PANEL_QUEUE
from workers.topology import agent_queue, is_amqp

# The broker's CA certificate an agent pinned at join (the panel's own is PANEL_BROKER_CA_FILE).
BROKER_CA_ENV = "ASCEND_PANEL_BROKER_CA_FILE"


def broker_url() -> str:
    return os.environ.get("CELERY_BROKER_URL") or os.environ.get("REDIS_URL") or "redis://127.0.0.1:6379/0"


def ssl_options(url: str, ca_file: str | None) -> dict | None:
    """Celery's broker_use_ssl for `url`: for amqps://, the server's certificate must verify against
    `ca_file` (the CA pinned at join) or, without one, the system's CAs, and name the host dialled."""
    if not url.startswith("amqps://"):
        return None
    options = {"cert_reqs": ssl.CERT_REQUIRED, "server_hostname": urlsplit(url).hostname}
    if ca_file:
        options["ca_certs"] = ca_file
    return options


def transport_options(url: str) -> dict:
    """Celery's broker_transport_options for `url`. Panel tasks are short and idempotent (ingest, sweeps):
    what a killed panel worker had taken but not acknowledged comes back after two minutes, not the Redis
    transport's default hour; agent tasks are acknowledged when they start (workers.tasks.base), so a long
    install is never redelivered by this. On RabbitMQ every publish waits for the broker's confirm: the
    ingest queue refuses what is past its bound (panel.nodes.agents.broker_admin.bound_ingest_queue), and
    without a confirm such a refusal is silent, so the agent's spool would not keep the message."""
    options = {"socket_connect_timeout": 3, "visibility_timeout": 120}
    if is_amqp(url):
        options["confirm_publish"] = True
    return options


app = Celery("ascend_panel")
app.conf.update(
    broker_url=broker_url(),
    result_backend=None,
    task_ignore_result=True,
    task_serializer="json",
    accept_content=["json"],
    task_default_queue=PANEL_QUEUE,
    task_acks_late=True,
    task_reject_on_worker_lost=True,
    worker_prefetch_multiplier=1,
    broker_connection_retry_on_startup=True,
    # Agents and workers outlive a broker restart: they reconnect for as long as it takes.
    broker_connection_max_retries=None,
    # Not Celery's prefetch reduction after a reconnect: with the threads pool it restores the prefetch count
    # (basic.qos) from the pool thread that accepts a task, on the connection the consumer thread is reading,
    # and that thread then waits for an answer it never gets; the worker takes nothing more from its queue
    # (the fault tier's broker-mid-deploy: the delete's stop never picked up after a RabbitMQ restart).
    worker_enable_prefetch_count_reduction=False,
    # A send that the broker does not take within about a second raises, so the caller can keep the message
    # (the agent's spool, the panel's outbox) instead of hanging a request or a task.
    task_publish_retry_policy={
        "max_retries": 2,
        "interval_start": 0.2,
        "interval_step": 0.3,
        "interval_max": 0.5,
    },
    broker_transport_options=transport_options(broker_url()),
    worker_hijack_root_logger=False,
    enable_utc=True,
    broker_use_ssl=ssl_options(
        broker_url(), os.environ.get(BROKER_CA_ENV) or os.environ.get("PANEL_BROKER_CA_FILE")
    ),
)


def configure_agent(celery_app: Celery, queue_name: str) -> None:
    """What an agent's worker needs on a broker where its user may only read its own queue and write the
    ingest exchange: the queue named, not declared; no remote control (its pidbox queue and reply exchange),
    no task events. Run with --without-mingle --without-gossip --without-heartbeat (workers.agent)."""
    celery_app.conf.update(
        task_queues=[agent_queue(queue_name, agent=is_amqp(celery_app.conf.broker_url))],
        worker_enable_remote_control=False,
        worker_send_task_events=False,
        task_send_sent_event=False,
    )
