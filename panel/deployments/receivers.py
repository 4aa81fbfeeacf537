"""What deployments do when something below them happens (connected in DeploymentsConfig.ready())."""

from panel.core.choices import OperationKind, OperationStatus
from panel.deployments import images
from panel.deployments.services import log_start_events, on_operation_terminal
from panel.operations.signals import events_stored, operation_ended


def connect() -> None:
    operation_ended.connect(_operation_ended, dispatch_uid="deployments-operation-ended")
    events_stored.connect(_events_stored, dispatch_uid="deployments-events-stored")


def _operation_ended(sender, operation, **kwargs) -> None:
    # failed launches too: they restart with back-off
    if operation.kind in (OperationKind.DEPLOY, OperationKind.STOP, OperationKind.BENCHMARK):
        on_operation_terminal(operation)
    elif operation.kind in images.IMAGE_KINDS and operation.status == OperationStatus.SUCCEEDED:
        images.apply_result(operation)


def _events_stored(sender, operation, events, failed, **kwargs) -> None:
    if operation.kind == OperationKind.DEPLOY:
        log_start_events(operation, events, failed=failed)
