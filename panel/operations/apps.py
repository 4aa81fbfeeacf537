from django.apps import AppConfig


class OperationsConfig(AppConfig):
    name = "panel.operations"
    label = "operations"
