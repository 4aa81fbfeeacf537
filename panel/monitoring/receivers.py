"""What monitoring does when something below it happens (connected in MonitoringConfig.ready())."""

from panel.monitoring import refusals
from panel.monitoring.alerts import node_came_back, node_went_offline
from panel.nodes.signals import message_refused, node_offline, node_online


def connect() -> None:
    node_online.connect(_node_online, dispatch_uid="monitoring-node-online")
    node_offline.connect(_node_offline, dispatch_uid="monitoring-node-offline")
    message_refused.connect(_message_refused, dispatch_uid="monitoring-message-refused")


def _node_online(sender, node, **kwargs) -> None:
    node_came_back(node)


def _node_offline(sender, node, **kwargs) -> None:
    node_went_offline(node)


def _message_refused(sender, kind, **kwargs) -> None:
    refusals.count(kind)
