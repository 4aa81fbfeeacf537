"""What provisioning does when something below it happens (connected in ProvisioningConfig.ready())."""

from panel.core.domain.choices import OperationKind
from panel.nodes.signals import node_online
from panel.operations.signals import events_stored, operation_ended
from panel.provisioning.services import record_late_events, record_outcome, resume_after_reboot


def connect() -> None:
    operation_ended.connect(_operation_ended, dispatch_uid="provisioning-operation-ended")
    node_online.connect(_node_online, dispatch_uid="provisioning-node-online")
    events_stored.connect(_events_stored, dispatch_uid="provisioning-events-stored")


def _operation_ended(sender, operation, **kwargs) -> None:
    if operation.kind in (OperationKind.PREFLIGHT, OperationKind.INSTALL):  # failed and cancelled ones too
        record_outcome(operation)


def _node_online(sender, node, **kwargs) -> None:
    resume_after_reboot(node)


def _events_stored(sender, operation, **kwargs) -> None:
    if operation.kind == OperationKind.INSTALL and operation.is_terminal:
        record_late_events(operation)
