"""Websocket authentication: the session cookie (browsers) or an API token header (scripts). A socket
outlives the request that opened it, so `credential_still_valid` re-checks whichever one it came with;
a watch (`?watch=true`, panel/core/rest/watch.py) re-checks its request's with `request_credential_holds`."""

from importlib import import_module

from channels.auth import AuthMiddlewareStack
from channels.db import database_sync_to_async
from channels.middleware import BaseMiddleware
from channels.security.websocket import AllowedHostsOriginValidator
from django.conf import settings

from panel.accounts.authentication import user_for_token
from panel.accounts.models import SCOPE_DEPLOY, ApiToken


@database_sync_to_async
def _user_for_token(raw):
    return user_for_token(raw)


class TokenAuthMiddleware(BaseMiddleware):
    async def __call__(self, scope, receive, send):
        headers = dict(scope.get("headers") or [])
        auth = headers.get(b"authorization", b"").decode("latin-1").split()
        if len(auth) == 2 and auth[0].lower() in ("bearer", "token"):
            user, token = await _user_for_token(auth[1])
            # Sockets carry the panel's live events: an inference-only key does not open one.
            if user is not None and token.covers(SCOPE_DEPLOY):
                scope = {**scope, "user": user, "api_token_id": token.pk}
        return await super().__call__(scope, receive, send)


class BrowserOriginOrToken:
    """Browsers send Origin with every websocket handshake, and it must be one of ALLOWED_HOSTS: a page
    elsewhere could otherwise open a socket that signs in with the user's cookies. A handshake without
    Origin is no browser's but a script's, which signs in with its API token (`Authorization: Token ...`
    or `Bearer ...`): its cookies are dropped, so a session alone never opens a socket without Origin."""

    def __init__(self, inner):
        self.inner = inner
        self.browser = AllowedHostsOriginValidator(inner)

    async def __call__(self, scope, receive, send):
        headers = scope.get("headers") or []
        if any(name == b"origin" for name, _value in headers):
            return await self.browser(scope, receive, send)
        scope = {**scope, "headers": [(name, value) for name, value in headers if name != b"cookie"]}
        return await self.inner(scope, receive, send)


def PanelAuthStack(inner):  # reads like the channels stacks it wraps
    return AuthMiddlewareStack(TokenAuthMiddleware(inner))


@database_sync_to_async
def credential_still_valid(scope) -> bool:
    """Whether the socket's credential still signs in its user: the API token is neither revoked nor expired,
    or the session still exists and still belongs to the user; and the user is still active."""
    token_id = scope.get("api_token_id")
    if token_id is not None:
        return credential_holds(scope["user"], token_id=token_id)
    session_key = scope["session"].session_key
    return session_key is not None and credential_holds(scope["user"], session_key=session_key)


def request_credential_holds(request) -> bool:
    """The same for a DRF request that outlives its start (a watch): its API token, else its session, else
    (HTTP Basic, where allowed) only that the user is still active."""
    from rest_framework.authentication import SessionAuthentication

    if isinstance(request.auth, ApiToken):
        return credential_holds(request.user, token_id=request.auth.pk)
    if isinstance(request.successful_authenticator, SessionAuthentication):
        return credential_holds(request.user, session_key=request._request.session.session_key or "")
    return credential_holds(request.user)


def credential_holds(user, *, token_id=None, session_key=None) -> bool:
    """Whether `user` is still signed in by the API token `token_id`, or by the session `session_key`
    (neither given: whether the user is still active)."""
    from django.contrib.auth import get_user, get_user_model
    from django.http import HttpRequest

    if token_id is not None:
        return ApiToken.objects.usable().filter(pk=token_id, user=user, user__is_active=True).exists()
    if session_key is None:
        return get_user_model().objects.filter(pk=user.pk, is_active=True).exists()
    # A fresh read of the session (logged out, or password changed) and of the user (deactivated): the same
    # checks a page request makes.
    request = HttpRequest()  # get_user reads only its session
    request.session = import_module(settings.SESSION_ENGINE).SessionStore(session_key)
    current = get_user(request)
    return current.is_authenticated and current.pk == user.pk
