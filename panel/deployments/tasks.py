"""Panel tasks of deployments: the reconcile beat and the agents' probe answers."""

from panel.core.infra.panel_tasks import panel_task
from panel.deployments import sleeping
from panel.deployments.rollouts.reconcile import ingest_probe, tick
from panel.nodes.agents.trust import Refused, open_envelope
from workers.celery_app import app
from workers.task_names import INGEST_DEPLOYMENT_PROBE

RECONCILE = "panel.reconcile_deployments"
WAKE_FAILED = "panel.deployments.restart_after_failed_wake"


@panel_task(RECONCILE, ignore_result=True)
def reconcile_deployments() -> dict:
    done = tick()
    # Then idle engines go to sleep (issue 36): after the tick, so a launch or stop it sent is under way.
    done["slept"] = sleeping.idle_step()
    return done


@panel_task(WAKE_FAILED, ignore_result=True)
def restart_after_failed_wake(deployment_id: int, why: list[dict], wake_s: float) -> None:
    """The gateway could not wake the engine: record `wake_failed` and restart it
    (panel.gateway.instances.wake)."""
    sleeping.restart_after_failed_wake(deployment_id, why, wake_s)


@app.task(name=INGEST_DEPLOYMENT_PROBE, ignore_result=True)
def ingest_deployment_probe(envelope: dict) -> None:
    try:
        node, _signer, message = open_envelope("probe", INGEST_DEPLOYMENT_PROBE, envelope)
    except Refused:
        return
    ingest_probe({**message, "node": node.name})
