import hashlib
import secrets

from django.conf import settings
from django.db import models
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

TOKEN_PREFIX = "ap_"  # noqa: S105  (a visible marker, not a secret)


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

    objects = ApiTokenQuerySet.as_manager()

    class Meta:
        ordering = ["-created"]
        constraints = [models.UniqueConstraint(fields=["user", "name"], name="token_unique_name_per_user")]

    def __str__(self):
        return f"{self.name} ({self.prefix}…)"

    @classmethod
    def issue(cls, user, name: str, expires=None) -> tuple["ApiToken", str]:
        raw = TOKEN_PREFIX + secrets.token_urlsafe(32)
        token = cls.objects.create(
            user=user, name=name, key_hash=hash_token(raw), prefix=raw[:10], expires=expires
        )
        return token, raw

    @property
    def is_usable(self) -> bool:
        return self.revoked is None and (self.expires is None or self.expires > timezone.now())


class IdempotentAnswer(models.Model):
    """The answer to a POST sent with an Idempotency-Key, written in the same transaction as what the POST
    created (panel.core.idempotency): a retry after a crash finds either both or neither."""

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
