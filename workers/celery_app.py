"""The Celery app shared by agents and the panel worker. Configured from the environment only, so an agent
needs nothing but broker access."""

import os

from celery import Celery

from workers.task_names import PANEL_QUEUE


def broker_url() -> str:
    return os.environ.get("CELERY_BROKER_URL") or os.environ.get("REDIS_URL") or "redis://127.0.0.1:6379/0"


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
    # A send that the broker does not take within about a second raises, so the caller can keep the message
    # (the agent's spool, the panel's outbox) instead of hanging a request or a task.
    task_publish_retry_policy={
        "max_retries": 2,
        "interval_start": 0.2,
        "interval_step": 0.3,
        "interval_max": 0.5,
    },
    broker_transport_options={"socket_connect_timeout": 3},
    worker_hijack_root_logger=False,
    enable_utc=True,
)
