from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class ForensicsConfig(AppConfig):
    name = "panel.forensics"
    verbose_name = _("Diagnostics")

    def ready(self):
        from panel.forensics import receivers  # models load only once the app registry is ready

        receivers.connect()
