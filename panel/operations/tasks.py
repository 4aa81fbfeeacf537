import logging

import redis

from panel.core.infra.panel_tasks import panel_task
from panel.nodes.agents.trust import Refused, open_envelope, send_agent_task
from panel.operations.reaper import reap
from panel.operations.services import ingest_events as ingest
from panel.operations.services import still_wanted
from workers.celery_app import app
from workers.task_names import AGENT_STILL_WANTED_ANSWER, ASK_STILL_WANTED, INGEST_EVENTS, PANEL_QUEUE

log = logging.getLogger(__name__)

ANSWER_VALIDITY_S = 30.0  # the agent waits about ten seconds for it (workers.asking)


# An event batch must not be lost to a panel Redis that is away for a moment (restarting, failing over): the
# nonce check (panel.core.infra.refusals.first_sight) needs it, and a task that failed would be acknowledged
# and gone. The batch is sent again after a back-off, for as long as it counts (24 h, workers.identity); the
# broker kept it meanwhile, so it waits in the broker as it would with the panel worker down.
INGEST_RETRY_MAX_S = 30


@app.task(name=INGEST_EVENTS, bind=True, max_retries=None)
def ingest_events(self, envelope: dict) -> int:
    try:
        # A batch redelivered after a worker died mid-task is taken again (its events are stored once by
        # attempt and number); refused as a replay of its own nonce, its events were lost (the fault tier).
        redelivered = bool((self.request.delivery_info or {}).get("redelivered"))
        node, _signer, batch = open_envelope("event_batch", INGEST_EVENTS, envelope, redelivered=redelivered)
    except Refused:
        return 0
    except (redis.ConnectionError, redis.TimeoutError) as error:
        log.warning("event batch not ingested: the panel's Redis is unreachable (%s); retrying", error)
        countdown = min(2 ** (self.request.retries + 1), INGEST_RETRY_MAX_S)
        # Through the panel's own queue: a retry carries an eta and a retry count, control fields that the
        # ingest queue's guard (panel.nodes.agents.ingest_guard) refuses from anyone, the panel's worker
        # included.
        raise self.retry(exc=error, countdown=countdown, queue=PANEL_QUEUE) from error
    return len(ingest(batch, sender=node))


@app.task(name=ASK_STILL_WANTED)
def ask_still_wanted(envelope: dict) -> bool | None:
    """An agent asks whether a delivery is still wanted: the answer goes back signed on its node's queue."""
    try:
        node, _signer, ask = open_envelope("ask", ASK_STILL_WANTED, envelope)
    except Refused:
        return None
    answer = still_wanted(ask, sender=node.name)
    send_agent_task(node, AGENT_STILL_WANTED_ANSWER, {"answer": answer}, expires=ANSWER_VALIDITY_S)
    return answer["wanted"]


@panel_task("panel.reap_operations")
def reap_operations() -> dict:
    return reap()
