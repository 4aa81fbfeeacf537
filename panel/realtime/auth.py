"""Websocket authentication: the session cookie (browsers) or an API token header (scripts)."""

from channels.auth import AuthMiddlewareStack
from channels.db import database_sync_to_async
from channels.middleware import BaseMiddleware


@database_sync_to_async
def _user_for_token(raw):
    from panel.accounts.authentication import user_for_token

    return user_for_token(raw)[0]


class TokenAuthMiddleware(BaseMiddleware):
    async def __call__(self, scope, receive, send):
        headers = dict(scope.get("headers") or [])
        auth = headers.get(b"authorization", b"").decode("latin-1").split()
        if len(auth) == 2 and auth[0].lower() in ("bearer", "token"):
            user = await _user_for_token(auth[1])
            if user is not None:
                scope = {**scope, "user": user}
        return await super().__call__(scope, receive, send)


def PanelAuthStack(inner):  # noqa: N802  (reads like the channels stacks it wraps)
    return AuthMiddlewareStack(TokenAuthMiddleware(inner))
