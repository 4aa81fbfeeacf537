"""Websocket authentication: the session cookie (browsers) or an API token header (scripts). A socket
outlives the request that opened it, so `credential_still_valid` re-checks whichever one it came with."""

from importlib import import_module
from types import SimpleNamespace

from channels.auth import AuthMiddlewareStack
from channels.db import database_sync_to_async
from channels.middleware import BaseMiddleware
from django.conf import settings


@database_sync_to_async
def _user_for_token(raw):
    from panel.accounts.authentication import user_for_token

    return user_for_token(raw)


class TokenAuthMiddleware(BaseMiddleware):
    async def __call__(self, scope, receive, send):
        from panel.accounts.models import SCOPE_DEPLOY

        headers = dict(scope.get("headers") or [])
        auth = headers.get(b"authorization", b"").decode("latin-1").split()
        if len(auth) == 2 and auth[0].lower() in ("bearer", "token"):
            user, token = await _user_for_token(auth[1])
            # Sockets carry the panel's live events: an inference-only key does not open one.
            if user is not None and token.covers(SCOPE_DEPLOY):
                scope = {**scope, "user": user, "api_token_id": token.pk}
        return await super().__call__(scope, receive, send)


def PanelAuthStack(inner):  # noqa: N802  (reads like the channels stacks it wraps)
    return AuthMiddlewareStack(TokenAuthMiddleware(inner))


@database_sync_to_async
def credential_still_valid(scope) -> bool:
    """Whether the socket's credential still signs in its user: the API token is neither revoked nor expired,
    or the session still exists and still belongs to the user; and the user is still active."""
    from django.contrib.auth import get_user

    from panel.accounts.models import ApiToken

    user = scope["user"]
    token_id = scope.get("api_token_id")
    if token_id is not None:
        return ApiToken.objects.usable().filter(pk=token_id, user=user, user__is_active=True).exists()
    session_key = scope["session"].session_key
    if session_key is None:
        return False
    # A fresh read of the session (logged out, or password changed) and of the user (deactivated): the same
    # checks a page request makes.
    fresh = import_module(settings.SESSION_ENGINE).SessionStore(session_key)
    current = get_user(SimpleNamespace(session=fresh))
    return current.is_authenticated and current.pk == user.pk
