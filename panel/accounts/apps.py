from django.apps import AppConfig
from django.conf import settings
from django.db import transaction
from django.db.models.signals import post_delete, post_migrate, post_save

from panel.realtime.broadcast import credentials_changed


class AccountsConfig(AppConfig):
    name = "panel.accounts"
    label = "accounts"

    def ready(self):
        from django.contrib.auth.signals import user_login_failed

        from panel.accounts.signin_limits import count_failure  # models load only once the registry is ready

        post_migrate.connect(_ensure_role_groups, sender=self)
        user_login_failed.connect(count_failure, dispatch_uid="panel.accounts.count_signin_failure")
        # Signals rather than a service: users are also changed through Django's admin and the shell.
        for sender in (settings.AUTH_USER_MODEL, "accounts.ApiToken"):
            post_save.connect(_credentials_changed, sender=sender)
            post_delete.connect(_credentials_changed, sender=sender)


def _credentials_changed(sender, instance, **kwargs):
    """A user or one of their tokens was saved or deleted (revoked, deactivated, password changed, …): once
    committed, that user's open websockets re-check their credential; a false alarm costs one query each."""
    user_id = getattr(instance, "user_id", instance.pk)
    transaction.on_commit(lambda: credentials_changed(user_id))


def _ensure_role_groups(**kwargs):
    from panel.accounts.bootstrap import ensure_role_groups  # models load only once the registry is ready

    ensure_role_groups()
