from django.apps import AppConfig


class DeploymentsConfig(AppConfig):
    name = "panel.deployments"
    label = "deployments"

    def ready(self):
        from panel.deployments import receivers  # models load only once the app registry is ready

        receivers.connect()
