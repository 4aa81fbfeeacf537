"""Account use-cases the pages and the API share: issuing and revoking API tokens (both audited).

A token is issued by a signed-in user (a page, or the API with a session) or by another token (the API). A
token may only mint tokens no wider than itself: scopes it covers, models among its own when it is limited
to some, limits no higher than its own, and an expiry no later than its own.
"""

from dataclasses import dataclass, field

from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext as _

from panel.accounts.models import SCOPE_ADMIN, SCOPES, ApiToken, scope_covers
from panel.audit import actions
from panel.audit.services import record


@dataclass
class TokenGrant:
    """What a new token may do. Empty `allowed_models` means every model; None limits mean no limit."""

    scopes: list[str] = field(default_factory=lambda: [SCOPE_ADMIN])
    allowed_models: list[str] = field(default_factory=list)
    requests_per_minute: int | None = None
    tokens_per_minute: int | None = None

    def as_fields(self) -> dict:
        return {
            "scopes": sorted(set(self.scopes), key=SCOPES.index),
            "allowed_models": sorted(set(self.allowed_models)),
            "requests_per_minute": self.requests_per_minute,
            "tokens_per_minute": self.tokens_per_minute,
        }


def default_grant(parent: ApiToken | None) -> TokenGrant:
    """What a token gets when the request says nothing: all its issuer may give (the owner's full rights
    when a person issues it), so scripts written before scopes keep getting the tokens they got."""
    if parent is None:
        return TokenGrant()
    return TokenGrant(
        scopes=list(parent.scopes),
        allowed_models=list(parent.allowed_models),
        requests_per_minute=parent.requests_per_minute,
        tokens_per_minute=parent.tokens_per_minute,
    )


def wider_than_parent(grant: TokenGrant, expires, parent: ApiToken | None) -> dict[str, str]:
    """{field: why} for each way `grant` (and `expires`) would be wider than the issuing token."""
    if parent is None:
        return {}
    problems = {}
    beyond = [scope for scope in grant.scopes if not scope_covers(parent.scopes, scope)]
    if beyond:
        problems["scopes"] = _("This token cannot give scopes it does not have: {scopes}.").format(
            scopes=", ".join(beyond)
        )
    if parent.allowed_models:
        outside = sorted(set(grant.allowed_models) - set(parent.allowed_models))
        if not grant.allowed_models or outside:
            problems["models"] = _("Limit the new token to this token's models: {models}.").format(
                models=", ".join(parent.allowed_models)
            )
    for name in ("requests_per_minute", "tokens_per_minute"):
        mine = getattr(parent, name)
        wanted = getattr(grant, name)
        if mine is not None and (wanted is None or wanted > mine):
            problems[name] = _("At most {limit}, this token's own limit.").format(limit=mine)
    if parent.expires is not None and (expires is None or expires > parent.expires):
        problems["expires"] = _("The new token must expire no later than this one ({when}).").format(
            when=parent.expires.isoformat(timespec="minutes")
        )
    return problems


def issue_token(user, name: str, expires=None, grant: TokenGrant | None = None) -> tuple[ApiToken, str]:
    """A new token for `user`; returns it with the raw key (shown once, never stored)."""
    fields = (grant or TokenGrant()).as_fields()
    with transaction.atomic():
        token, raw = ApiToken.issue(user, name, expires, **fields)
        record(user, actions.TOKEN_CREATED, name, prefix=token.prefix, expires=expires, **fields)
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
