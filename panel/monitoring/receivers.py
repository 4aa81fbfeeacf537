"""What monitoring does when something below it happens (connected in MonitoringConfig.ready())."""

from panel.monitoring.alerting import deployment_alerts
from panel.monitoring.alerting.alerts import node_came_back, node_went_offline
from panel.monitoring.signals import deployment_observed
from panel.nodes.signals import node_offline, node_online


def connect() -> None:
    node_online.connect(_node_online, dispatch_uid="monitoring-node-online")
    node_offline.connect(_node_offline, dispatch_uid="monitoring-node-offline")
    deployment_observed.connect(_deployment_observed, dispatch_uid="monitoring-deployment-observed")


def _deployment_observed(sender, snapshot, **kwargs) -> None:
    deployment_alerts.observe(snapshot)


def _node_online(sender, node, **kwargs) -> None:
    node_came_back(node)


def _node_offline(sender, node, **kwargs) -> None:
    node_went_offline(node)
