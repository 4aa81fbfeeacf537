from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class FabricConfig(AppConfig):
    name = "panel.fabric"
    verbose_name = _("NPU network")
