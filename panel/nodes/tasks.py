from panel.core.infra.panel_tasks import panel_task
from panel.nodes.agents import ingest_guard
from panel.nodes.agents.trust import Refused, open_envelope
from panel.nodes.services import mark_silent_nodes_offline as sweep
from panel.nodes.services import record_heartbeat
from workers.celery_app import app
from workers.task_names import HEARTBEAT

ingest_guard.install(app)


@app.task(name=HEARTBEAT)
def heartbeat(envelope: dict) -> None:
    try:
        node, signer, beat = open_envelope("heartbeat", HEARTBEAT, envelope)
    except Refused:
        return
    record_heartbeat(beat, signer=signer, node=node)


@panel_task("panel.mark_silent_nodes_offline")
def mark_silent_nodes_offline() -> list[str]:
    return sweep()
