"""Panel tasks of deployments: the reconcile beat and the agents' probe answers."""

from panel.core.panel_tasks import panel_task
from panel.deployments.reconcile import ingest_probe, tick
from panel.nodes.trust import Refused, open_envelope
from workers.celery_app import app
from workers.task_names import INGEST_DEPLOYMENT_PROBE

RECONCILE = "panel.reconcile_deployments"


@panel_task(RECONCILE, ignore_result=True)
def reconcile_deployments() -> dict:
    return tick()


@app.task(name=INGEST_DEPLOYMENT_PROBE, ignore_result=True)
def ingest_deployment_probe(envelope: dict) -> None:
    try:
        node, _signer, message = open_envelope("probe", INGEST_DEPLOYMENT_PROBE, envelope)
    except Refused:
        return
    ingest_probe({**message, "node": node.name})
