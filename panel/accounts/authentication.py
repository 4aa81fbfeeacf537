from datetime import timedelta

from django.conf import settings
from django.utils import timezone
from django.utils.translation import gettext as _
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework import authentication, exceptions

from panel.accounts.models import ApiToken, hash_token

LAST_USED_RESOLUTION = timedelta(minutes=1)


def user_for_token(raw: str):
    """The user a raw token belongs to, or None. Revoked and expired tokens are refused."""
    tokens = ApiToken.objects.usable().select_related("user", "user__temporary_password")
    token = tokens.filter(key_hash=hash_token(raw)).first()
    if token is None or not token.user.is_active:
        return None, None
    now = timezone.now()
    if token.last_used is None or now - token.last_used > LAST_USED_RESOLUTION:
        ApiToken.objects.filter(pk=token.pk).update(last_used=now)
    return token.user, token


class ApiTokenAuthentication(authentication.BaseAuthentication):
    """`Authorization: Bearer ap_…` (or `Token ap_…`)."""

    keywords = ("bearer", "token")

    def authenticate(self, request):
        header = authentication.get_authorization_header(request).decode("latin-1").split()
        if not header or header[0].lower() not in self.keywords:
            return None
        if len(header) != 2:
            raise exceptions.AuthenticationFailed(_("Malformed Authorization header: use 'Bearer <token>'."))
        user, token = user_for_token(header[1])
        if user is None:
            raise exceptions.AuthenticationFailed(_("Invalid, expired or revoked API token."))
        return user, token

    def authenticate_header(self, request):
        return "Bearer"


class ApiTokenScheme(OpenApiAuthenticationExtension):
    """Tells /api/schema/ (and the API docs' Authorize button) how to send an API token."""

    target_class = ApiTokenAuthentication
    name = "apiToken"

    def get_security_definition(self, auto_schema):
        return {"type": "http", "scheme": "bearer", "description": "An API token (ap_…) from your account."}


class OptionalBasicAuthentication(authentication.BasicAuthentication):
    """HTTP Basic, only while PANEL_API_BASIC_AUTH is on (off in production: a password sent with every
    request is a password to steal; API tokens can be scoped in time and revoked). Checked per request."""

    def authenticate(self, request):
        if not settings.PANEL_API_BASIC_AUTH:
            return None
        return super().authenticate(request)


class BasicScheme(OpenApiAuthenticationExtension):
    target_class = OptionalBasicAuthentication
    name = "basicAuth"

    def get_security_definition(self, auto_schema):
        return {"type": "http", "scheme": "basic", "description": "Only where PANEL_API_BASIC_AUTH is on."}
