from django.apps import AppConfig


class GatewayConfig(AppConfig):
    name = "panel.gateway"
    label = "gateway"

    def ready(self):
        from panel.gateway import metrics, signals  # models load only once the app registry is ready
        from panel.monitoring.prometheus import EXTRA_COLLECTORS

        signals.connect()
        if metrics.collect not in EXTRA_COLLECTORS:
            EXTRA_COLLECTORS.append(metrics.collect)
