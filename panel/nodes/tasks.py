from panel.nodes import ingest_guard
from workers.celery_app import app
from workers.task_names import HEARTBEAT

ingest_guard.install(app)


@app.task(name=HEARTBEAT)
def heartbeat(envelope: dict) -> None:
    from panel.nodes.services import record_heartbeat
    from panel.nodes.trust import Refused, open_envelope

    try:
        _node, signer, beat = open_envelope("heartbeat", HEARTBEAT, envelope)
    except Refused:
        return
    record_heartbeat(beat, signer=signer)


@app.task(name="panel.mark_silent_nodes_offline")
def mark_silent_nodes_offline() -> list[str]:
    from panel.nodes.services import mark_silent_nodes_offline as sweep

    return sweep()


@app.task(name="panel.dispatch_ssh_probes", acks_late=False)
def dispatch_ssh_probes() -> list[str]:
    from panel.nodes.ssh_probes import dispatch_ssh_probes as dispatch

    return dispatch()
