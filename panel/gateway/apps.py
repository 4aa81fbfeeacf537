from django.apps import AppConfig


class GatewayConfig(AppConfig):
    name = "panel.gateway"
    label = "gateway"
