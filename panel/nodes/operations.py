"""Operations that act on a node."""

from panel.core.choices import OperationKind
from panel.operations.services import create_operation
from workers.task_names import AGENT_INVENTORY


def start_inventory(node, user=None):
    return create_operation(kind=OperationKind.INVENTORY, node=node, task_name=AGENT_INVENTORY, user=user)
