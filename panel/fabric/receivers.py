"""What fabric does when something below it happens (connected in FabricConfig.ready())."""

from panel.core.domain.choices import OperationKind
from panel.fabric.services import on_operation_terminal
from panel.operations.signals import operation_ended


def connect() -> None:
    operation_ended.connect(_operation_ended, dispatch_uid="fabric-operation-ended")


def _operation_ended(sender, operation, **kwargs) -> None:
    # failed ones too: the check then says which node did not answer
    if operation.kind == OperationKind.FABRIC_CHECK:
        on_operation_terminal(operation)
