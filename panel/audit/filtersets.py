import django_filters
from django import forms
from django.utils.translation import gettext_lazy as _

from panel.audit.actions import AuditAction
from panel.audit.models import AuditEntry
from panel.core.rest.filters import moment_filter


class AddressFilter(django_filters.CharFilter):
    """An IP address, checked as one: PostgreSQL's inet column refuses anything else with a server error."""

    field_class = forms.GenericIPAddressField


class AuditEntryFilterSet(django_filters.FilterSet):
    """Shared by the /audit/ page and /api/v1/audit/."""

    actor = django_filters.CharFilter(field_name="actor_name", label=_("Who"))
    action = django_filters.ChoiceFilter(choices=AuditAction.choices, label=_("Action"))
    target = django_filters.CharFilter(lookup_expr="icontains", label=_("Target"))
    ip = AddressFilter(label=_("Address"))
    since = moment_filter("time", "gte", _("Since"))
    until = moment_filter("time", "lt", _("Until"))

    class Meta:
        model = AuditEntry
        fields = ["actor", "action", "target", "ip", "since", "until"]
