"""What deployments do when something below them happens (connected in DeploymentsConfig.ready())."""

from panel.core.domain.choices import OperationKind, OperationStatus
from panel.deployments import npu_health_decisions
from panel.deployments.failover import fence
from panel.deployments.launch import images
from panel.deployments.launch.fabric_gate import after_gate
from panel.deployments.logs import log_start_events
from panel.deployments.rollouts.reconcile import on_operation_terminal
from panel.fabric.signals import fabric_check_finished
from panel.nodes.signals import node_online
from panel.operations.signals import events_stored, operation_ended


def connect() -> None:
    operation_ended.connect(_operation_ended, dispatch_uid="deployments-operation-ended")
    events_stored.connect(_events_stored, dispatch_uid="deployments-events-stored")
    fabric_check_finished.connect(_fabric_check_finished, dispatch_uid="deployments-fabric-check-finished")
    npu_health_decisions.connect()
    # A node back from silence: the engines of rows moved off it meanwhile are stopped there.
    node_online.connect(fence.on_node_online, dispatch_uid="deployments-fence-on-node-online")


def _operation_ended(sender, operation, **kwargs) -> None:
    # failed launches too: they restart with back-off
    if operation.kind in (OperationKind.DEPLOY, OperationKind.STOP, OperationKind.BENCHMARK):
        on_operation_terminal(operation)
    elif operation.kind in images.IMAGE_KINDS and operation.status == OperationStatus.SUCCEEDED:
        images.apply_result(operation)


def _events_stored(sender, operation, events, failed, **kwargs) -> None:
    if operation.kind == OperationKind.DEPLOY:
        log_start_events(operation, events, failed=failed)


def _fabric_check_finished(sender, check, **kwargs) -> None:
    after_gate(check)
