import hashlib
import secrets

from django.conf import settings
from django.db import models
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

TOKEN_PREFIX = "ap_"  # noqa: S105  (a visible marker, not a secret)

# What a token may reach. `admin` is the owner's full rights (what every token had before scopes); `deploy`
# is the panel's API and the CLI without users and tokens; `inference` is the /v1 gateway only.
SCOPE_INFERENCE = "inference"
SCOPE_DEPLOY = "deploy"
SCOPE_ADMIN = "admin"
SCOPES = (SCOPE_INFERENCE, SCOPE_DEPLOY, SCOPE_ADMIN)


def full_rights() -> list[str]:
    return [SCOPE_ADMIN]


def scope_covers(scopes, needed: str) -> bool:
    return SCOPE_ADMIN in scopes or needed in scopes


def hash_token(raw: str) -> str:
    return hashlib.sha256(raw.encode()).hexdigest()


class ApiTokenQuerySet(models.QuerySet):
    def usable(self):
        now = timezone.now()
        return self.filter(revoked__isnull=True).filter(
            models.Q(expires__isnull=True) | models.Q(expires__gt=now)
        )


class ApiToken(models.Model):
    """A per-user API token. Only its SHA-256 is stored; the raw token is shown once, at creation."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens")
    name = models.CharField(_("name"), max_length=100)
    key_hash = models.CharField(max_length=64, unique=True, editable=False)
    prefix = models.CharField(
        max_length=12, editable=False, help_text="First characters, to recognise a token."
    )
    created = models.DateTimeField(auto_now_add=True)
    expires = models.DateTimeField(_("expires"), null=True, blank=True)
    last_used = models.DateTimeField(_("last used"), null=True, blank=True)
    revoked = models.DateTimeField(_("revoked"), null=True, blank=True)
    scopes = models.JSONField(_("scopes"), default=full_rights)
    # Served model names the gateway lets this token use; empty means every model.
    allowed_models = models.JSONField(_("models"), default=list, blank=True)
    requests_per_minute = models.PositiveIntegerField(_("requests per minute"), null=True, blank=True)
    tokens_per_minute = models.PositiveIntegerField(_("tokens per minute"), null=True, blank=True)

    objects = ApiTokenQuerySet.as_manager()

    class Meta:
        ordering = ["-created"]
        constraints = [models.UniqueConstraint(fields=["user", "name"], name="token_unique_name_per_user")]

    def __str__(self):
        return f"{self.name} ({self.prefix}…)"

    @classmethod
    def issue(cls, user, name: str, expires=None, **limits) -> tuple["ApiToken", str]:
        """`limits`: scopes, allowed_models, requests_per_minute, tokens_per_minute (none: full rights)."""
        raw = TOKEN_PREFIX + secrets.token_urlsafe(32)
        token = cls.objects.create(
            user=user, name=name, key_hash=hash_token(raw), prefix=raw[:10], expires=expires, **limits
        )
        return token, raw

    def covers(self, scope: str) -> bool:
        return scope_covers(self.scopes, scope)

    @property
    def label(self) -> str:
        """How usage and metrics name the key: its owner and its name (unique per owner)."""
        return f"{self.user.get_username()}/{self.name}"

    @property
    def is_usable(self) -> bool:
        return self.revoked is None and (self.expires is None or self.expires > timezone.now())


class IdempotentAnswer(models.Model):
    """The answer to a POST sent with an Idempotency-Key, written in the same transaction as what the POST
    created (panel.core.rest.idempotency): a retry after a crash finds either both or neither."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    key_hash = models.CharField(max_length=64)
    body_hash = models.CharField(max_length=64)
    status = models.PositiveSmallIntegerField()
    data = models.JSONField(default=dict)
    created = models.DateTimeField(auto_now_add=True, db_index=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["user", "key_hash"], name="idempotent_answer_once")]

    def __str__(self):
        return f"{self.user_id} {self.key_hash[:12]} → {self.status}"


class TemporaryPassword(models.Model):
    """A password an admin handed over (a new user, a reset): until its owner changes it they reach only the
    page that changes it, and the API answers 403 (panel.accounts.temporary). The row goes with the change."""

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL,
        on_delete=models.CASCADE,
        primary_key=True,
        related_name="temporary_password",
    )
    issued = models.DateTimeField(auto_now_add=True)

    def __str__(self):
        return f"{self.user_id} since {self.issued:%Y-%m-%d %H:%M}"
