"""Where messages go: the exchanges and queues the panel and the agents share, on either transport.

- `ingest` exchange: the only one a node may publish to. Routing key `ingest` reaches the panel's ingest
  queue (the Celery tasks agents send: event batches, probe answers, the central agent's heartbeats for SSH
  nodes); `metrics` reaches the lossy metrics queue (raw signed lines of metrics and of agents' heartbeats,
  workers.metrics_inbox); `heartbeat` reaches the heartbeat queue, the agents' liveness kept apart from that
  bulk data, so that a node flooding the metrics queue (whose overflow drops the oldest lines) cannot push
  other nodes' heartbeats out of it, and the panel reads heartbeats first.
- `panel` exchange and queue: the panel's own tasks (beat's sweeps, webhooks); nodes cannot write to it.
- `nodes` exchange: the panel's tasks for agents, routed to `node.<name>` (and the central agent's
  `ssh-runner`); only the panel writes to it, and each node may read only its own queue.

On RabbitMQ (the fleet's broker) the panel declares all of this (it alone has `configure` rights on its
vhost); an agent's user may declare nothing, so agents name these entities with no_declare. On make run's
embedded Redis the same names are used and whoever comes first declares them: one code path for both.
"""

from urllib.parse import unquote, urlsplit

from kombu import Exchange, Queue

from workers.task_names import PANEL_QUEUE, SSH_RUNNER_QUEUE

INGEST_EXCHANGE = "ingest"
INGEST_QUEUE = "ingest"
METRICS_QUEUE = "metrics"
HEARTBEAT_QUEUE = "heartbeats"
HEARTBEAT_ROUTING_KEY = "heartbeat"
NODES_EXCHANGE = "nodes"
PANEL_EXCHANGE = PANEL_QUEUE

# The metrics queue is lossy on purpose (a panel outage must not fill the broker, and after one the panel
# wants current figures): at most this many lines, the oldest dropped first, none older than this.
METRICS_MAX_BACKLOG = 20_000  # ~2 KB each: 40 MB at most, ten minutes of 32 silent-panel nodes
METRICS_MAX_AGE_S = 30
# A heartbeat counts for 10 s (workers.identity.VALIDITY_S); a few seconds of a large fleet's beats.
HEARTBEAT_MAX_BACKLOG = 20_000
HEARTBEAT_MAX_AGE_S = 10


def is_amqp(url: str | None) -> bool:
    return (url or "").startswith(("amqp://", "amqps://", "pyamqp://"))


def vhost_of(url: str) -> str:
    """The RabbitMQ vhost an amqp URL names ("/" when it names none), as kombu reads it."""
    path = urlsplit(url).path
    return unquote(path[1:]) if len(path) > 1 else "/"


def ingest_exchange(*, agent: bool = False) -> Exchange:
    return Exchange(INGEST_EXCHANGE, "direct", durable=True, no_declare=agent)


def ingest_queue(*, agent: bool = False) -> Queue:
    return Queue(
        INGEST_QUEUE, ingest_exchange(agent=agent), routing_key=INGEST_QUEUE, durable=True, no_declare=agent
    )


def metrics_queue(*, agent: bool = False) -> Queue:
    return Queue(
        METRICS_QUEUE,
        ingest_exchange(agent=agent),
        routing_key=METRICS_QUEUE,
        durable=True,
        no_declare=agent,
        queue_arguments={
            "x-max-length": METRICS_MAX_BACKLOG,
            "x-overflow": "drop-head",
            "x-message-ttl": METRICS_MAX_AGE_S * 1000,
        },
    )


def heartbeat_queue(*, agent: bool = False) -> Queue:
    return Queue(
        HEARTBEAT_QUEUE,
        ingest_exchange(agent=agent),
        routing_key=HEARTBEAT_ROUTING_KEY,
        durable=True,
        no_declare=agent,
        queue_arguments={
            "x-max-length": HEARTBEAT_MAX_BACKLOG,
            "x-overflow": "drop-head",
            "x-message-ttl": HEARTBEAT_MAX_AGE_S * 1000,
        },
    )


def panel_queue() -> Queue:
    return Queue(PANEL_QUEUE, Exchange(PANEL_EXCHANGE, "direct", durable=True), routing_key=PANEL_QUEUE)


def agent_queue(name: str, *, agent: bool = False) -> Queue:
    """A queue only the panel writes to: `node.<name>` or the central agent's `ssh-runner`."""
    exchange = Exchange(NODES_EXCHANGE, "direct", durable=True, no_declare=agent)
    return Queue(name, exchange, routing_key=name, durable=True, no_declare=agent)


def route(queue: Queue) -> dict:
    """send_task options that publish to `queue` through its exchange. Celery sends a direct queue given
    alone through the default exchange, which no node may write to (and which bypasses the panel's)."""
    return {"queue": queue, "exchange": queue.exchange.name, "routing_key": queue.routing_key}


def panel_topology() -> list[Queue]:
    """What the panel declares when it starts (node queues are declared when each node joins)."""
    return [panel_queue(), ingest_queue(), metrics_queue(), heartbeat_queue(), agent_queue(SSH_RUNNER_QUEUE)]


def declare(connection, queues: list[Queue]) -> None:
    """Declare `queues` (with their exchanges and bindings) on `connection`: the panel's rights only."""
    with connection.channel() as channel:
        for queue in queues:
            queue(channel).declare()
