from django.apps import AppConfig


class MonitoringConfig(AppConfig):
    name = "panel.monitoring"
    label = "monitoring"

    def ready(self):
        from panel.monitoring import receivers  # models load only once the app registry is ready

        receivers.connect()
