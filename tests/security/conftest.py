"""The attack tier: a node's real credentials against the real broker (RabbitMQ, a vhost of this session's
own: tests/rabbitmq.py) and the panel's real Redis.

The whole tier runs with Celery on RabbitMQ, the fleet setup: Celery's broker is process-wide, so this tier
runs in a pytest process of its own (`make test-security`), not beside the fast tier's Redis-backed tests.
Attacks on the panel worker and agent use the integration tier's in-process Celery worker, on RabbitMQ."""

import pytest

from tests.integration.conftest import celery_worker  # noqa: F401  (a fixture)
from tests.rabbitmq import start_test_broker
from workers.task_names import PANEL_QUEUE


@pytest.fixture(scope="session")
def rabbit():
    broker = start_test_broker()
    yield broker
    broker.close()


@pytest.fixture(scope="session", autouse=True)
def _celery_on_test_redis(rabbit):
    """Overrides tests/conftest.py's: this tier's Celery talks to RabbitMQ as the panel's own user, and the
    panel declares its topology there as it does when its worker starts."""
    from workers.celery_app import app
    from workers.topology import declare, panel_topology

    app.conf.broker_url = rabbit.panel_url
    app.conf.broker_transport_options = {"socket_connect_timeout": 3}
    with app.connection_for_write() as connection:
        declare(connection, panel_topology())


@pytest.fixture(autouse=True)
def fleet_settings(settings, rabbit):
    settings.CELERY_BROKER_URL = rabbit.panel_url
    settings.PANEL_BROKER_ADMIN_URL = rabbit.admin_url
    settings.PANEL_AGENT_BROKER_URL = rabbit.agent_url
    # Broker users are broker-wide: the central agent's carries the session's suffix, so that rabbit.close()
    # deletes it and sessions running at once keep theirs.
    settings.PANEL_BROKER_CENTRAL_USER = f"central-{rabbit.suffix}"
    return settings


@pytest.fixture
def panel_worker(_wired_to_redis):
    """The panel worker as `celery -A panel.celery worker -Q panel` runs it, in this process, on RabbitMQ."""
    from celery.contrib.testing.worker import start_worker

    import panel.audit.tasks  # noqa: F401  a panel task a node may name
    import panel.monitoring.tasks  # noqa: F401  the metrics ingester
    import panel.nodes.tasks  # noqa: F401  heartbeats, the ingest queue and its guard
    import panel.operations.tasks  # noqa: F401  event batches
    from workers.celery_app import app

    with start_worker(
        app,
        pool="threads",
        concurrency=4,
        perform_ping_check=False,
        queues=[PANEL_QUEUE],
        loglevel="WARNING",
        shutdown_timeout=30,
    ) as worker:
        yield worker
