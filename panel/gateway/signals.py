"""Drop the gateway's cached answers (panel.gateway.access.identity) the moment what they say changes: a
token, its owner or the owner's groups, a deployment. After commit, so the next request reads the new rows."""

from django.conf import settings
from django.db import transaction
from django.db.models.signals import m2m_changed, post_delete, post_save

from panel.accounts.models import ApiToken
from panel.deployments.services import served_name_of
from panel.gateway import store
from panel.gateway.access.identity import caller_key, pool_key


def connect() -> None:
    from django.contrib.auth import get_user_model

    for sender in ("accounts.ApiToken",):
        post_save.connect(_token_changed, sender=sender, dispatch_uid="gateway-token-saved")
        post_delete.connect(_token_changed, sender=sender, dispatch_uid="gateway-token-deleted")
    post_save.connect(_user_changed, sender=settings.AUTH_USER_MODEL, dispatch_uid="gateway-user-saved")
    m2m_changed.connect(_user_changed, sender=get_user_model().groups.through, dispatch_uid="gateway-groups")
    for signal, uid in ((post_save, "gateway-deployment-saved"), (post_delete, "gateway-deployment-deleted")):
        signal.connect(_deployment_changed, sender="deployments.Deployment", dispatch_uid=uid)


def _forget(keys: list[str]) -> None:
    if not keys:
        return

    def drop():
        try:
            store.client().delete(*keys)
        except Exception:  # a Redis that is down holds nothing to drop; the TTLs cover the rest
            import logging

            logging.getLogger(__name__).warning("could not drop cached gateway answers %s", keys)

    transaction.on_commit(drop)


def _token_changed(sender, instance, **kwargs):
    _forget([caller_key(instance.key_hash)])


def _user_changed(sender, instance, **kwargs):
    if kwargs.get("action", "post_add").startswith("pre_"):
        return  # m2m_changed fires before and after; after is enough
    user_ids = [instance.pk] if not kwargs.get("reverse") else list(kwargs.get("pk_set") or [])
    hashes = ApiToken.objects.filter(user_id__in=user_ids).values_list("key_hash", flat=True)
    _forget([caller_key(key_hash) for key_hash in hashes])


def _deployment_changed(sender, instance, **kwargs):
    _forget([pool_key(served_name_of(instance)), pool_key(instance.name)])
