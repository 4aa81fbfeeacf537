from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class ProvisioningConfig(AppConfig):
    name = "panel.provisioning"
    verbose_name = _("Provisioning")

    def ready(self):
        from panel.provisioning import receivers  # models load only once the app registry is ready

        receivers.connect()
