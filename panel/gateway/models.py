from django.conf import settings
from django.db import models
from django.utils.translation import gettext_lazy as _

from panel.accounts.roles import ADMIN, has_role, role_of


class UsageQuerySet(models.QuerySet):
    def visible_to(self, user):
        """Admins see every key's usage; everyone else the usage of their own keys."""
        if user is None or not user.is_authenticated or role_of(user) is None:
            return self.none()
        return self if has_role(user, ADMIN) else self.filter(user=user)


class UsageRecord(models.Model):
    """One request through the gateway, as it ended. Kept PANEL_GATEWAY_USAGE_RAW_DAYS; the hourly roll-ups
    (UsageHour) keep the sums longer. Names are copied, so a row outlives its key and its deployment."""

    request_id = models.CharField(max_length=32, unique=True)
    time = models.DateTimeField(_("time"), db_index=True)  # when the request arrived
    token = models.ForeignKey(
        "accounts.ApiToken", on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    key = models.CharField(_("key"), max_length=255)  # "<owner>/<token name>"
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    model = models.CharField(_("model"), max_length=128)  # the served model name asked for
    deployment = models.ForeignKey(
        "deployments.Deployment", on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    deployment_name = models.CharField(_("deployment"), max_length=63, blank=True)
    instance = models.CharField(_("instance"), max_length=100, blank=True)
    endpoint = models.CharField(_("endpoint"), max_length=32)  # chat/completions, completions, embeddings
    stream = models.BooleanField(default=False)
    status = models.PositiveSmallIntegerField(_("status"))
    error = models.CharField(_("error"), max_length=64, blank=True)  # the OpenAI error code, if any
    prompt_tokens = models.PositiveIntegerField(default=0)
    completion_tokens = models.PositiveIntegerField(default=0)
    ttft_ms = models.FloatField(null=True, blank=True)  # to the first generated token; streams only
    duration_ms = models.FloatField()
    attempts = models.PositiveSmallIntegerField(default=1)  # 2 when it was retried on another instance

    objects = UsageQuerySet.as_manager()

    class Meta:
        ordering = ["-time"]
        indexes = [models.Index(fields=["user", "time"]), models.Index(fields=["model", "time"])]

    def __str__(self):
        return f"{self.time:%Y-%m-%d %H:%M:%S} {self.key} {self.model} {self.status}"

    @property
    def is_error(self) -> bool:
        return self.status >= 400


class UsageHour(models.Model):
    """The sums of one hour for one key, model and deployment. Kept PANEL_GATEWAY_USAGE_HOURLY_DAYS."""

    hour = models.DateTimeField(_("hour"), db_index=True)
    token = models.ForeignKey(
        "accounts.ApiToken", on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    key = models.CharField(_("key"), max_length=255)
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    model = models.CharField(_("model"), max_length=128)
    deployment_name = models.CharField(_("deployment"), max_length=63, blank=True)
    requests = models.PositiveIntegerField(default=0)
    errors = models.PositiveIntegerField(default=0)
    prompt_tokens = models.PositiveBigIntegerField(default=0)
    completion_tokens = models.PositiveBigIntegerField(default=0)
    ttft_ms_sum = models.FloatField(default=0)
    ttft_count = models.PositiveIntegerField(default=0)
    duration_ms_sum = models.FloatField(default=0)

    objects = UsageQuerySet.as_manager()

    class Meta:
        ordering = ["-hour", "key", "model"]
        constraints = [
            models.UniqueConstraint(
                fields=["hour", "key", "model", "deployment_name"], name="usage_hour_unique_group"
            )
        ]

    def __str__(self):
        return f"{self.hour:%Y-%m-%d %H}h {self.key} {self.model}"
