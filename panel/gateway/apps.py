from django.apps import AppConfig


class GatewayConfig(AppConfig):
    name = "panel.gateway"
    label = "gateway"

    def ready(self):
        from panel.deployments.drain import SERVING_CHECKS  # models load only once the registry is ready
        from panel.gateway import metrics, pool, signals
        from panel.monitoring.prometheus import EXTRA_COLLECTORS

        signals.connect()
        if metrics.collect not in EXTRA_COLLECTORS:
            EXTRA_COLLECTORS.append(metrics.collect)
        if pool.serves not in SERVING_CHECKS:
            SERVING_CHECKS.append(pool.serves)
