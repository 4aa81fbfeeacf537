from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class FabricConfig(AppConfig):
    name = "panel.fabric"
    verbose_name = _("NPU network")

    def ready(self):
        from panel.fabric import receivers  # models load only once the app registry is ready

        receivers.connect()
