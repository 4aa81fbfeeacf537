"""Account use-cases the pages and the API share: issuing and revoking API tokens (both audited)."""

from django.db import transaction
from django.utils import timezone

from panel.accounts.models import ApiToken
from panel.audit import actions
from panel.audit.services import record


def issue_token(user, name: str, expires=None) -> tuple[ApiToken, str]:
    """A new token for `user`; returns it with the raw key (shown once, never stored)."""
    with transaction.atomic():
        token, raw = ApiToken.issue(user, name, expires)
        record(user, actions.TOKEN_CREATED, name, prefix=token.prefix, expires=expires)
    return token, raw


def revoke_token(token: ApiToken) -> bool:
    """Revoke (the row stays for the record). False when it was revoked already."""
    with transaction.atomic():
        token = ApiToken.objects.select_for_update().select_related("user").get(pk=token.pk)
        if token.revoked is not None:
            return False
        token.revoked = timezone.now()
        token.save(update_fields=["revoked"])  # a save: the owner's open websockets re-check (accounts.apps)
        record(None, actions.TOKEN_REVOKED, token.name, prefix=token.prefix, owner=token.user.get_username())
    return True
