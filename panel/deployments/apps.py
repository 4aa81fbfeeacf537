from django.apps import AppConfig


class DeploymentsConfig(AppConfig):
    name = "panel.deployments"
    label = "deployments"
