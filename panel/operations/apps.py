from django.apps import AppConfig


class OperationsConfig(AppConfig):
    name = "panel.operations"
    label = "operations"

    def ready(self):
        from panel.operations import receivers  # models load only once the app registry is ready

        receivers.connect()
