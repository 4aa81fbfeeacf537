from django.apps import AppConfig


class CatalogConfig(AppConfig):
    name = "panel.catalog"
    label = "catalog"

    def ready(self):
        from panel.catalog import receivers  # models load only once the app registry is ready

        receivers.connect()
