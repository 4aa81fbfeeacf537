from panel.core.panel_tasks import panel_task
from panel.nodes.trust import Refused, open_envelope, send_agent_task
from panel.operations.reaper import reap
from panel.operations.services import ingest_events as ingest
from panel.operations.services import still_wanted
from workers.celery_app import app
from workers.task_names import AGENT_STILL_WANTED_ANSWER, ASK_STILL_WANTED, INGEST_EVENTS

ANSWER_VALIDITY_S = 30.0  # the agent waits about ten seconds for it (workers.asking)


@app.task(name=INGEST_EVENTS)
def ingest_events(envelope: dict) -> int:
    try:
        node, _signer, batch = open_envelope("event_batch", INGEST_EVENTS, envelope)
    except Refused:
        return 0
    return len(ingest(batch, sender=node.name))


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
