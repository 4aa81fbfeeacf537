from panel.nodes.trust import Refused, open_envelope
from panel.operations.reaper import reap
from panel.operations.services import ingest_events as ingest
from workers.celery_app import app
from workers.task_names import INGEST_EVENTS


@app.task(name=INGEST_EVENTS)
def ingest_events(envelope: dict) -> int:
    try:
        node, _signer, batch = open_envelope("event_batch", INGEST_EVENTS, envelope)
    except Refused:
        return 0
    return len(ingest(batch, sender=node.name))


@app.task(name="panel.reap_operations")
def reap_operations() -> dict:
    return reap()
