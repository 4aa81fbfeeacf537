"""The panel worker's side of the ingest exchange: consume the ingest queue beside the panel's own, and
run nothing but ingest tasks from it.

A node's broker user may publish to the ingest exchange only, but may put any task name in what it
publishes there; the panel's own tasks (sweeps, pruning, webhooks) come through the `panel` exchange, which
nodes cannot write to. So a message that arrived through the ingest exchange and names any task outside
INGEST_TASKS is acknowledged, logged and counted (`panel_rejected_messages_total{kind="ingest-task"}`),
never run. On RabbitMQ the exchange a message came through is the broker's word, not the sender's.

An ingest task that came that way is data, never work: its message must have the closed shape an agent's
send_task gives it (check_ingest_message). Celery's control fields — callbacks, errbacks, chain, chord, an
eta, an expiry past INGEST_MAX_EXPIRES_S, a group, retries, time limits, stamps, a shadow name, any header
Celery does not write — would make the panel worker publish work of the sender's choosing (signed by the
panel's publish hook), hold the message unacknowledged past the queue's bound, or run it later; such a
message is acknowledged, logged and counted (kind "ingest-task", reason "control") before its request is
even built. The reply address Celery always writes is dropped: the panel keeps no results and replies to no
one.
"""

import logging
from datetime import datetime, timedelta

from celery import bootsteps

from panel.nodes.agents.broker_admin import BrokerAdminError, bound_ingest_queue
from panel.nodes.agents.trust import refuse
from workers.contracts import utcnow
from workers.task_names import INGEST_TASKS, PANEL_QUEUE
from workers.topology import INGEST_EXCHANGE, declare, ingest_queue, is_amqp, panel_topology

log = logging.getLogger(__name__)


def came_through_ingest(message) -> bool:
    return (message.delivery_info or {}).get("exchange") == INGEST_EXCHANGE


# The headers Celery's protocol 2 writes for a plain send_task, each with what an agent's may hold. Any other
# header, or one of these with another value, is a control field a node has no business setting.
_ABSENT = (None,)
_ZERO = (None, 0)
# None: any value; "expires": a time soon enough; a type or a tuple of the types and values allowed.
INGEST_HEADERS: dict[str, type | tuple | str | None] = {
    "lang": ("py",),
    "task": None,  # checked against the handler's own name
    "id": str,
    "shadow": _ABSENT,
    "eta": _ABSENT,
    "expires": "expires",
    "group": _ABSENT,
    "group_index": _ABSENT,
    "retries": _ZERO,
    "timelimit": ([None, None], (None, None), None),
    "root_id": str,
    "parent_id": (str, type(None)),
    "argsrepr": str,
    "kwargsrepr": str,
    "origin": str,
    "ignore_result": (bool, type(None)),
    "replaced_task_nesting": _ZERO,
    "stamped_headers": (None, []),
    "stamps": (None, {}),
    # Not Celery's: kombu's Redis transport marks a message it restores (a worker died holding it
    # unacknowledged) this way. It asks for no work; refusing it lost a dead worker's ingest batches.
    "redelivered": (True,),
}
INGEST_MAX_HEADER_CHARS = 2048  # Celery cuts argsrepr at 1024
INGEST_MAX_EXPIRES_S = 3600.0
INGEST_MAX_BODY_BYTES = 8 * 1024 * 1024
_EMBED = ("callbacks", "errbacks", "chain", "chord")


class ControlField(Exception):
    """An ingest message that asks for work, not just data; the message names the field."""


def check_ingest_message(task_name: str, headers: dict, body, size: int = 0) -> None:
    """Raises ControlField unless `headers` and the decoded `body` ((args, kwargs, embed)) are what an agent's
    send_task of `task_name` with one signed envelope writes: one dict argument, no keyword arguments, and
    none of Celery's control fields."""
    if size > INGEST_MAX_BODY_BYTES:
        raise ControlField(f"{size} bytes, more than {INGEST_MAX_BODY_BYTES}")
    if not isinstance(headers, dict) or headers.get("task") != task_name:
        raise ControlField("not a protocol 2 message for this task (no or another task header)")
    for field, value in headers.items():
        _check_header(field, value)
    if not isinstance(body, list | tuple) or len(body) != 3:
        raise ControlField("the body is not (args, kwargs, embed)")
    args, kwargs, embed = body
    if not isinstance(args, list | tuple) or len(args) != 1 or not isinstance(args[0], dict):
        raise ControlField("args: an ingest task takes one signed envelope")
    if kwargs:
        raise ControlField("kwargs: an ingest task takes none")
    if not isinstance(embed, dict) or set(embed) - set(_EMBED):
        raise ControlField("embed: fields beyond Celery's callbacks, errbacks, chain and chord")
    for field in _EMBED:
        if embed.get(field):
            raise ControlField(f"{field}: work for the panel to publish")


def _check_header(field: str, value) -> None:
    if field not in INGEST_HEADERS:
        raise ControlField(f"header {field!r}: not one Celery writes for a plain send")
    allowed = INGEST_HEADERS[field]
    if isinstance(value, str) and len(value) > INGEST_MAX_HEADER_CHARS:
        raise ControlField(f"header {field!r}: longer than {INGEST_MAX_HEADER_CHARS} characters")
    if allowed is None:
        return
    if allowed == "expires":
        if value is not None and not _expires_soon(value):
            raise ControlField(f"expires {value!r}: further than {INGEST_MAX_EXPIRES_S:.0f} s ahead")
        return
    if isinstance(allowed, type):
        allowed = (allowed,)
    types = tuple(kind for kind in allowed if isinstance(kind, type))
    if (types and isinstance(value, types)) or any(value == v for v in allowed if not isinstance(v, type)):
        return
    raise ControlField(f"header {field!r}: {str(value)[:80]!r} is a control field's value")


def _expires_soon(value) -> bool:
    try:
        when = datetime.fromisoformat(str(value))
    except ValueError:
        return False
    if when.tzinfo is None:
        return False
    return when <= utcnow() + timedelta(seconds=INGEST_MAX_EXPIRES_S)


def _decoded(message, body):
    if body is not None:
        return body
    try:
        return message.decode()
    except Exception as error:  # kombu's decoders raise whatever the content type's parser raises
        raise ControlField(f"the body does not decode: {error.__class__.__name__}") from None


def guarded(task_name: str, strategy):
    """`strategy` (Celery's per-task message handler), refusing a message that came through ingest when it
    names a task agents may not send, or asks for work (check_ingest_message)."""

    def handle(message, body, ack, reject, callbacks, **options):
        if not came_through_ingest(message):
            return strategy(message, body, ack, reject, callbacks, **options)
        headers = message.headers or {}
        sender = str(headers.get("origin") or "?")[:120]
        if task_name not in INGEST_TASKS:
            refuse("ingest-task", sender, f"task {task_name!r} is not one agents may send the panel")
            message.ack()
            return None
        try:
            check_ingest_message(task_name, headers, _decoded(message, body), len(message.body or b""))
        except ControlField as why:
            refuse("ingest-task", sender, f"{task_name}: {why}", "control")
            message.ack()
            return None
        message.properties["reply_to"] = ""  # the panel keeps no results: nothing is ever sent back
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
    """Wraps every task's handler once the consumer has (re)built them."""

    label = "ingest guard"
    requires = ("celery.worker.consumer.tasks:Tasks",)

    def start(self, consumer):
        for name, strategy in list(consumer.strategies.items()):
            consumer.strategies[name] = guarded(name, strategy)


def install(app) -> None:
    app.steps["worker"].add(IngestQueueStep)
    app.steps["consumer"].add(IngestGuardStep)
