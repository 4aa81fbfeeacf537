from django.apps import AppConfig
from django.db.models.signals import post_migrate


class AccountsConfig(AppConfig):
    name = "panel.accounts"
    label = "accounts"

    def ready(self):
        post_migrate.connect(_ensure_role_groups, sender=self)


def _ensure_role_groups(**kwargs):
    from panel.accounts.bootstrap import ensure_role_groups

    ensure_role_groups()
