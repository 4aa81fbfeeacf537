"""A deployment's timeline says when an NPU it runs on changed health: the nodes app sends
`npu_health_changed` (panel.nodes.health.health_state), and here each deployment holding that NPU records a
decision
(npu_suspect, npu_failed or npu_recovered) with the signal that moved it, in the same transaction. What is
done about it (excluding its replicas, placing them again) is the failover's, which settles nothing here."""

from django.utils.translation import gettext_noop

from panel.core.domain.choices import DecisionActor, DecisionKind, DecisionOutcome, NpuHealthState
from panel.deployments import decisions
from panel.deployments.reasons import part
from panel.nodes.signals import npu_health_changed

KIND = {
    NpuHealthState.SUSPECT: DecisionKind.NPU_SUSPECT,
    NpuHealthState.FAILED: DecisionKind.NPU_FAILED,
    NpuHealthState.OK: DecisionKind.NPU_RECOVERED,
}


def connect() -> None:
    npu_health_changed.connect(_record, dispatch_uid="deployments-npu-health-decisions")


def _record(sender, npu, old, new, reason, **kwargs) -> None:
    admin = reason.get("signal") == "admin"
    for deployment in npu.deployments.all():
        decisions.record(
            deployment,
            KIND[new],
            reason=[
                part(
                    gettext_noop("NPU {npu} on {node} is now {state}: {detail}"),
                    npu=f"{npu.npu_id}/{npu.chip_id}",
                    node=npu.node.name,
                    state=new,
                    detail=reason.get("detail", ""),
                )
            ],
            actor=DecisionActor.USER if admin else DecisionActor.LEADER,
            outcome=DecisionOutcome.DONE,
        )
