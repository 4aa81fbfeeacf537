"""What the catalog does when something below it happens (connected in CatalogConfig.ready())."""

from panel.catalog.results import apply_model_operation
from panel.core.domain.choices import MODEL_OPERATION_KINDS, OperationStatus
from panel.operations.signals import operation_ended


def connect() -> None:
    operation_ended.connect(_operation_ended, dispatch_uid="catalog-operation-ended")


def _operation_ended(sender, operation, **kwargs) -> None:
    if (
        operation.kind in MODEL_OPERATION_KINDS
        and operation.status == OperationStatus.SUCCEEDED
        and operation.node_id
    ):
        apply_model_operation(operation)
