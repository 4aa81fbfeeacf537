"""A node cannot flood the broker: the ingest queue is bounded (a RabbitMQ policy the panel sets,
panel.nodes.agents.broker_admin.bound_ingest_queue) and refuses what is past the bound. An agent's events are
not lost to that refusal: its publish waits for the broker's confirm, so the refused message stays in its
spool
(workers.spool) and goes out, in order, once the panel has drained the queue."""

import json

import pytest
from celery import Celery
from kombu import Connection

from panel.nodes.agents.broker_admin import INGEST_POLICY, bound_ingest_queue
from tests.security.test_fleet_transport import wait_for
from tests.security.test_node_broker_user import join
from workers.celery_app import transport_options
from workers.spool import Spool
from workers.topology import INGEST_QUEUE, ingest_queue, route

pytestmark = pytest.mark.django_db

BOUND = 3


def node_app(url: str) -> Celery:
    """A Celery app configured as an agent's is for publishing (workers.celery_app)."""
    app = Celery("flooding-node")
    app.conf.broker_url = url
    app.conf.broker_transport_options = transport_options(url)
    app.conf.task_publish_retry_policy = {"max_retries": 0}
    return app


def queued(rabbit) -> list[dict]:
    """Take every message off the ingest queue, as the panel worker would: their first argument each."""
    bodies = []
    with Connection(rabbit.panel_url) as connection:
        channel = connection.default_channel
        while (message := channel.basic_get(INGEST_QUEUE, no_ack=True)) is not None:
            bodies.append(json.loads(message.body)[0][0])
    return bodies


def depth(rabbit) -> int:
    with Connection(rabbit.panel_url) as connection:
        return connection.default_channel.queue_declare(INGEST_QUEUE, passive=True).message_count


@pytest.fixture
def bounded_ingest(rabbit, settings):
    queued(rabbit)  # what earlier tests left
    settings.PANEL_INGEST_MAX_MESSAGES = BOUND
    bound_ingest_queue()
    path = f"/api/queues/{rabbit.vhost}/{INGEST_QUEUE}"
    wait_for(
        lambda: (
            rabbit.api("GET", path).json().get("effective_policy_definition", {}).get("max-length") == BOUND
        ),
        "the policy to reach the ingest queue",
    )
    yield
    rabbit.api("DELETE", f"/api/policies/{rabbit.vhost}/{INGEST_POLICY}")
    queued(rabbit)


def test_the_ingest_queue_refuses_past_its_bound_and_the_agent_spools_what_was_refused(
    rabbit, bounded_ingest, tmp_path
):
    node = rabbit.node_name("flood")
    app = node_app(join(node)["broker_url"])
    queue = ingest_queue(agent=True)

    def publish(task_name, message):
        app.send_task(task_name, args=[message], **route(queue))

    spool = Spool(tmp_path, publish)
    for n in range(1, 6):
        spool.send("ingest_events", {"node": node, "n": n})

    assert depth(rabbit) == BOUND
    spooled = [
        json.loads(line)["message"]["n"] for line in (tmp_path / "spool.jsonl").read_text().splitlines()
    ]
    assert spooled == [4, 5]  # refused by the broker, kept by the agent, in order

    # The panel drains the queue; the agent's spool refills it as room appears, even during that drain.
    drained = [body["n"] for body in queued(rabbit)]
    wait_for(lambda: not (tmp_path / "spool.jsonl").exists(), "the spool to be delivered")
    drained += [body["n"] for body in queued(rabbit)]
    assert drained == [1, 2, 3, 4, 5]  # nothing lost, nothing twice, in order


@pytest.mark.attack("flood")
def test_a_node_that_publishes_without_confirms_still_cannot_grow_the_queue_past_its_bound(
    rabbit, bounded_ingest
):
    node = rabbit.node_name("flood-blind")
    url = join(node)["broker_url"]
    with Connection(url) as connection:  # no confirm_publish: the broker's refusals go unseen
        producer = connection.Producer()
        for n in range(BOUND * 10):
            producer.publish(
                [[{"node": node, "n": n}], {}, {}],
                exchange=ingest_queue(agent=True).exchange,
                routing_key=INGEST_QUEUE,
                serializer="json",
            )
    assert depth(rabbit) == BOUND
