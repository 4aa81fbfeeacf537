"""Shared model bits. No concrete models live here."""

from django.db import models

from panel.accounts.roles import role_of


class VisibleQuerySet(models.QuerySet):
    """The one permission question every view, API call and websocket subscription asks.

    Every signed-in user with a role may see every object today; the method exists so that narrowing
    (per-team nodes, say) is one change here rather than one per view.
    """

    def visible_to(self, user):
        if user is None or not user.is_authenticated or role_of(user) is None:
            return self.none()
        return self


def one_or_none(queryset):
    """The row of `queryset` (filtered on a unique key), or None: `.first()` without its ORDER BY. Django
    compiles that ORDER BY (the model's Meta.ordering) against every selected column, which was a tenth of
    the panel worker's CPU on the ingest path at fleet size (bench/fleet.py, docs/scaling.md)."""
    return next(iter(queryset.order_by()[:1]), None)


class TimestampedModel(models.Model):
    created = models.DateTimeField(auto_now_add=True)
    updated = models.DateTimeField(auto_now=True)

    objects = VisibleQuerySet.as_manager()

    class Meta:
        abstract = True


class InvalidTransition(Exception):
    """A state change that the state machine does not allow (a permanent error, never retried)."""
