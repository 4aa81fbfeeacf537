"""The attack tier: a node's real credentials against the real broker (RabbitMQ, a vhost of this session's
own: tests/rabbitmq.py) and the panel's real Redis.

The whole tier runs with Celery on RabbitMQ, the fleet setup: Celery's broker is process-wide, so this tier
runs in a pytest process of its own (`make test-security`), not beside the fast tier's Redis-backed tests.
Attacks on the panel worker and agent use the integration tier's in-process Celery worker, on RabbitMQ."""

import pytest

from tests.integration.conftest import celery_worker as celery_worker
from tests.rabbitmq import start_test_broker
from tests.sshd import restartable_sshd as restartable_sshd
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

    import panel.audit.tasks  # a panel task a node may name
    import panel.monitoring.tasks  # the metrics ingester
    import panel.nodes.tasks  # heartbeats, the ingest queue and its guard
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


# --- attacks as a node: its own broker user, its own key; and a bystander node that must not notice ---------


class NodeOnTheBroker:
    """A joined node as an attacker holding it would use it: its own broker URL (its user may write only to
    the ingest exchange) and its own key (the panel issued it; tests/conftest.py's agent_keys signs with
    it)."""

    def __init__(self, name: str, url: str):
        from kombu import Connection

        self.name, self.url = name, url
        self.connection = Connection(url, connect_timeout=5)
        self.producer = self.connection.Producer()

    def send_task(self, task_name: str, args: list, **options) -> None:
        """A Celery message through the ingest exchange, with whatever options the attacker adds."""
        from celery import Celery

        from workers.topology import ingest_queue, route

        sender = Celery("attacker", broker=self.url, set_as_current=False)
        sender.conf.broker_transport_options = {"socket_connect_timeout": 3, "confirm_publish": True}
        sender.send_task(task_name, args=args, **route(ingest_queue(agent=True)), **options)

    def push_line(self, line: bytes, routing_key: str = "metrics") -> None:
        """A raw line on the metrics path, published on the node's own connection."""
        from workers import metrics_inbox

        metrics_inbox.publish_raw(self.producer, line, routing_key)

    def close(self) -> None:
        self.connection.release()


@pytest.fixture
def attacker(rabbit):
    """A joined node, held by an attacker."""
    from tests.security.test_node_broker_user import join

    name = rabbit.node_name("attacker")
    node = NodeOnTheBroker(name, join(name)["broker_url"])
    yield node
    node.close()


@pytest.fixture
def bystander(rabbit, panel_worker, alice):
    """Another joined node, beating every half second through its own broker user while the test attacks:
    `assert_online()` says it stayed online throughout (each beat recorded within 3 s of being sent) and
    that the pages listing the fleet still answer an admin."""
    import threading
    import time

    from panel.nodes.models import Node
    from tests.security.test_node_broker_user import join
    from workers.contracts import Heartbeat, utcnow
    from workers.identity import inbox_line

    name = rabbit.node_name("bystander")
    node = NodeOnTheBroker(name, join(name)["broker_url"])
    stop, gaps = threading.Event(), []

    def beat():
        while not stop.wait(0.5):
            line = Heartbeat(node=name, time=utcnow(), agent_version="1", interval_s=1).model_dump_json()
            raw = b'{"heartbeat":' + line.encode() + b"}"
            node.push_line(inbox_line(name, raw, kind="heartbeat"), routing_key="heartbeat")

    def watch():
        from django.db import connection

        try:
            while not stop.wait(1.0):
                last = Node.objects.filter(name=name).values_list("last_heartbeat", flat=True).first()
                if last is not None and (utcnow() - last).total_seconds() > 3:
                    gaps.append((utcnow() - last).total_seconds())
        finally:
            connection.close()

    threads = [threading.Thread(target=beat, daemon=True), threading.Thread(target=watch, daemon=True)]
    threads[0].start()
    deadline = time.monotonic() + 30
    while Node.objects.filter(name=name, last_heartbeat__isnull=False).count() == 0:
        assert time.monotonic() < deadline, "the bystander's first heartbeat never arrived"
        time.sleep(0.2)
    threads[1].start()

    def assert_online():
        from django.test import Client

        assert not gaps, f"the bystander went {max(gaps):.1f} s without a recorded heartbeat"
        assert Node.objects.get(name=name).effective_status == "online"
        admin = Client()
        admin.force_login(alice)
        for path in ("/", "/nodes/", "/api/v1/nodes/"):
            assert admin.get(path).status_code == 200, path

    node.assert_online = assert_online
    yield node
    stop.set()
    for thread in threads:
        thread.join(5)
    node.close()


ATTACK_REPORT_ENV = "ASCEND_ATTACK_REPORT"


def pytest_runtest_logreport(report):
    """For bench/attacks.py: each test's outcome, its attack class and marks, one JSON line each."""
    import json
    import os

    path = os.environ.get(ATTACK_REPORT_ENV)
    if not path or (report.when != "call" and report.passed):
        return
    entry = {
        "id": report.nodeid,
        "when": report.when,
        "passed": report.passed,
        "skipped": report.skipped,
        "marks": report.attack_marks,
    }
    with open(path, "a", encoding="utf-8") as out:
        out.write(json.dumps(entry) + "\n")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    attack = item.get_closest_marker("attack")
    report.attack_marks = {
        "attack": attack.args[0] if attack else None,
        "flags": sorted({m.name for m in item.iter_markers()} & {"attacks_panel", "reaches_other_node"}),
        "bystander": "bystander" in item.fixturenames,
        "other_callers": "other_callers" in item.fixturenames,
    }
