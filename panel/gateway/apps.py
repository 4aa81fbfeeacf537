from django.apps import AppConfig


class GatewayConfig(AppConfig):
    name = "panel.gateway"
    label = "gateway"

    def ready(self):
        from panel.gateway import receivers  # models load only once the app registry is ready

        receivers.connect()
