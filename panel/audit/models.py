from django.conf import settings
from django.db import models
from django.utils.translation import gettext_lazy as _

from panel.accounts.roles import ADMIN, has_role
from panel.audit.actions import DEFAULT_COLOUR, AuditAction


class AuditQuerySet(models.QuerySet):
    def visible_to(self, user):
        """Only admins read the audit log (it names every user and where they sign in from)."""
        return self if has_role(user, ADMIN) else self.none()


class AuditEntry(models.Model):
    """Who did what, when, from where. Written by panel.audit.services.record; never edited."""

    time = models.DateTimeField(_("time"), auto_now_add=True, db_index=True)
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    # The name as it was (a failed sign-in names a user that may not exist; users may be deleted later).
    actor_name = models.CharField(_("who"), max_length=150, blank=True, db_index=True)
    action = models.CharField(_("action"), max_length=48, choices=AuditAction.choices, db_index=True)
    target = models.CharField(_("target"), max_length=255, blank=True)
    ip = models.GenericIPAddressField(_("address"), null=True, blank=True)
    details = models.JSONField(_("details"), default=dict, blank=True)

    objects = AuditQuerySet.as_manager()

    class Meta:
        ordering = ["-time", "-pk"]
        verbose_name = _("audit entry")
        verbose_name_plural = _("audit entries")

    def __str__(self):
        return f"{self.time:%Y-%m-%d %H:%M:%S} {self.actor_name or '-'} {self.action} {self.target}"

    @property
    def action_colour(self) -> str:
        return AuditAction.COLOURS.get(self.action, DEFAULT_COLOUR)
