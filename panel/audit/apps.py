from django.apps import AppConfig


class AuditConfig(AppConfig):
    name = "panel.audit"
    label = "audit"

    def ready(self):
        from panel.audit import signals  # models load only once the app registry is ready

        signals.connect()
