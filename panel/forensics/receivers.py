"""What forensics does when something below it happens (connected in ForensicsConfig.ready())."""

from panel.core.domain.choices import OperationKind
from panel.forensics.services import on_operation_terminal
from panel.operations.signals import operation_ended


def connect() -> None:
    operation_ended.connect(_operation_ended, dispatch_uid="forensics-operation-ended")


def _operation_ended(sender, operation, **kwargs) -> None:
    # failed ones too: the bundle is packed from the nodes that sent
    if operation.kind == OperationKind.DIAGNOSTICS:
        on_operation_terminal(operation)
