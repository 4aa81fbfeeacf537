"""A multi-node launch on NPUs waits for its NPU network check (panel.fabric.services.gate_launch): when the
check ends, the launches go out (it passed or only warned) or the deployment stops, failed, with the first
failure and its fix as the reason. The engines of a disaggregated deployment wait the same way for the check
of their NPU pairs (panel/deployments/launch/pd_fabric.py); several may wait for one check, and each is
stopped only by a failure that concerns it: of its own NPUs or host, or, for a decode engine (the one that
pulls the KV in MooncakeConnectorV1), of a path from a prefill NPU to its own that fails between two sound
NICs (the gateway pairs any prefill with any decode, so a decode that cannot reach one would fail requests).
"""

from django.utils.translation import gettext_noop

from panel.core.domain.choices import DeploymentRole, DeploymentState, DesiredState
from panel.deployments import reasons, services
from panel.deployments.models import Deployment
from panel.fabric.models import FabricCheck
from workers.steps.preflight import FAIL


def after_gate(check: FabricCheck) -> None:
    # Every engine still waiting for this check (one launched again meanwhile waits for a newer one).
    for deployment in Deployment.objects.select_for_update().filter(runtime__fabric_check=check.pk):
        _decide(deployment, check)


def _decide(deployment: Deployment, check: FabricCheck) -> None:
    if (
        deployment.desired_state != DesiredState.RUNNING
        or deployment.observed_state != DeploymentState.STARTING
    ):
        deployment.save()
        return
    failing = _failures_of(deployment, check)
    if not failing:
        services.move(deployment, DeploymentState.STARTING, "")
        deployment.save()
        services.send_launches(deployment, user=check.created_by)
        return
    problem = failing[0]
    templates = problem.get("templates") or {}
    params = problem.get("params") or {}
    heading = (
        gettext_noop("The NPU network between the prefill and decode hosts failed its check:")
        if deployment.role
        else gettext_noop("The NPU network check failed:")
    )
    reason = [
        reasons.part(heading),
        reasons.part(templates.get("detail") or problem["detail"], **params),
        reasons.part("—"),
        reasons.part(templates.get("fix") or problem["fix"], **params),
    ]
    deployment.runtime = {**deployment.runtime, "fabric": {"check": check.pk, "failures": failing}}
    deployment.next_restart_at = None
    services.move(deployment, DeploymentState.FAILED, reason)
    deployment.save()


def _failures_of(deployment: Deployment, check: FabricCheck) -> list[dict]:
    """The failing checklist entries that stop this engine, the one to name first."""
    failing = [entry for entry in check.verdict["checklist"] if entry["status"] == FAIL]
    if not deployment.role or "failing" not in check.verdict:
        return failing  # one engine over several nodes: any failure stops it
    where = check.verdict["failing"]
    own = {
        (part["node"], int(logic_id))
        for part in (deployment.spec or {}).get("parts") or []
        for logic_id in (part.get("launch") or {}).get("logic_ids") or []
    }
    hosts = {node for node, _logic_id in own}
    bad_nodes = hosts & set(where["nodes"])
    named = own & {tuple(npu) for npu in where["npus"]}
    if deployment.role == DeploymentRole.DECODE:
        for node, logic_id, peer, peer_id in where["paths"]:
            if (peer, peer_id) in own:  # pinged from the prefill end: the entry names that NPU
                named.add((node, logic_id))
    if not bad_nodes and not named:
        return []
    concerning = [entry for entry in failing if _names(entry, bad_nodes, named)]
    return concerning or failing  # a failure no entry locates (TLS across nodes): all of them


def _names(entry: dict, nodes: set[str], npus: set[tuple[str, int]]) -> bool:
    params = entry.get("params") or {}
    devices = {int(d) for d in str(params.get("devices") or "").split(",") if d.strip().isdigit()}
    if not devices:
        return params.get("node") in nodes and not entry["check"].startswith("npu_")
    return any((params.get("node"), device) in npus for device in devices)
