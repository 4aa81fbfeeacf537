from django.apps import AppConfig


class MonitoringConfig(AppConfig):
    name = "panel.monitoring"
    label = "monitoring"
