"""What provisioning does when something below it happens (connected in ProvisioningConfig.ready())."""

from panel.core.choices import OperationKind
from panel.operations.signals import operation_ended
from panel.provisioning.services import record_outcome


def connect() -> None:
    operation_ended.connect(_operation_ended, dispatch_uid="provisioning-operation-ended")


def _operation_ended(sender, operation, **kwargs) -> None:
    if operation.kind in (OperationKind.PREFLIGHT, OperationKind.INSTALL):  # failed and cancelled ones too
        record_outcome(operation)
