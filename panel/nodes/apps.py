from django.apps import AppConfig


class NodesConfig(AppConfig):
    name = "panel.nodes"
    label = "nodes"
