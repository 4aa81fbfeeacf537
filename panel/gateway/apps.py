from django.apps import AppConfig


class GatewayConfig(AppConfig):
    name = "panel.gateway"
    label = "gateway"

    def ready(self):
        from panel.gateway import signals

        signals.connect()
