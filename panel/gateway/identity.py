"""Who is calling the gateway: an API token with the inference scope, of an active user with a role.

One synchronous function, `resolve`, answers both questions a request asks the database (the caller and
the pool of the model it names), so a request leaves the event loop once.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.utils.translation import gettext as _

from panel.accounts.models import SCOPE_INFERENCE, ApiToken, hash_token
from panel.accounts.roles import role_of
from panel.gateway import pool as pools


@dataclass(frozen=True)
class Caller:
    token_id: int
    key: str  # "<owner>/<token name>": how usage rows and metrics name the key
    user_id: int
    allowed_models: tuple[str, ...]
    requests_per_minute: int | None
    tokens_per_minute: int | None

    def allows(self, served_name: str) -> bool:
        return not self.allowed_models or served_name in self.allowed_models

    @classmethod
    def of(cls, token: ApiToken) -> Caller:
        return cls(
            token_id=token.pk,
            key=token.label,
            user_id=token.user_id,
            allowed_models=tuple(token.allowed_models or ()),
            requests_per_minute=token.requests_per_minute,
            tokens_per_minute=token.tokens_per_minute,
        )


@dataclass(frozen=True)
class Refusal:
    status: int
    message: str
    kind: str
    code: str


@dataclass(frozen=True)
class Resolved:
    caller: Caller | None = None
    pool: pools.Pool | None = None
    refusal: Refusal | None = None


def caller_for(raw: str) -> tuple[Caller | None, Refusal | None]:
    token = ApiToken.objects.usable().select_related("user").filter(key_hash=hash_token(raw)).first()
    if token is None or not token.user.is_active:
        return None, Refusal(
            401, _("Invalid, expired or revoked API key."), "invalid_request_error", "invalid_api_key"
        )
    caller = Caller.of(token)
    if not token.covers(SCOPE_INFERENCE):
        return caller, Refusal(
            403,
            _("This API key has no inference scope; create one with it to call /v1."),
            "permission_error",
            "insufficient_scope",
        )
    if role_of(token.user) is None:
        return caller, Refusal(
            403, _("The key's owner has no role in the panel."), "permission_error", "no_role"
        )
    return caller, None


def resolve(raw: str, served_name: str | None) -> Resolved:
    """The caller and, when `served_name` is given, the pool it may use; or why not."""
    caller, refusal = caller_for(raw)
    if refusal is not None or served_name is None:
        return Resolved(caller=caller, refusal=refusal)
    if not caller.allows(served_name):
        return Resolved(
            caller=caller,
            refusal=Refusal(
                403,
                _("This API key may not use the model `{model}`.").format(model=served_name),
                "permission_error",
                "model_not_allowed",
            ),
        )
    found = pools.pool_for(served_name)
    if found is None:
        return Resolved(
            caller=caller,
            refusal=Refusal(
                404,
                _("The model `{model}` does not exist.").format(model=served_name),
                "invalid_request_error",
                "model_not_found",
            ),
        )
    return Resolved(caller=caller, pool=found)
