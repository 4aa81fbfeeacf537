"""What operations does when something below it happens (connected in OperationsConfig.ready())."""

from panel.nodes.signals import node_not_inventoried
from panel.operations.node_operations import inventory_once


def connect() -> None:
    node_not_inventoried.connect(_node_not_inventoried, dispatch_uid="operations-node-not-inventoried")


def _node_not_inventoried(sender, node, **kwargs) -> None:
    inventory_once(node)
