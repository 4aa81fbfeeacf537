"""What monitoring does when something below it happens (connected in MonitoringConfig.ready())."""

from panel.monitoring.alerts import node_came_back, node_went_offline
from panel.nodes.signals import node_offline, node_online


def connect() -> None:
    node_online.connect(_node_online, dispatch_uid="monitoring-node-online")
    node_offline.connect(_node_offline, dispatch_uid="monitoring-node-offline")


def _node_online(sender, node, **kwargs) -> None:
    node_came_back(node)


def _node_offline(sender, node, **kwargs) -> None:
    node_went_offline(node)
