"""Names people choose — deployments, users, API tokens: one rule each, checked the same way by forms, the
API and services.

A name that breaks its rule is refused with a message that names the field, its limit and the characters
it may hold; it is never cut to fit. That is why forms built here render no `maxlength` (a browser would
cut a pasted name silently) and why the API's field (panel.core.rest.names) keeps `max_length` for the
schema only, with the rule's own message in place of DRF's "no more than N characters".
"""

import re
from dataclasses import dataclass

from django import forms
from django.core.exceptions import ValidationError
from django.utils.functional import Promise, lazy
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _


@dataclass(frozen=True)
class NameRule:
    label: Promise
    limit: int
    pattern: re.Pattern
    allowed: Promise  # the characters `pattern` takes, in words

    def problem(self, value: str) -> str | None:
        """Why `value` is refused, or None when it is a good name."""
        if len(value) > self.limit:
            return gettext(
                "%(field)s is %(length)d characters long; it may be at most %(limit)d, made of %(allowed)s."
            ) % {"field": self.label, "length": len(value), "limit": self.limit, "allowed": self.allowed}
        if value and not self.pattern.fullmatch(value):
            bad = "".join(sorted({char for char in value if not self.pattern.fullmatch(char)}))
            return gettext("%(field)s may hold only %(allowed)s (at most %(limit)d); not “%(bad)s”.") % {
                "field": self.label,
                "allowed": self.allowed,
                "limit": self.limit,
                "bad": bad,
            }
        return None

    def validate(self, value: str) -> None:
        """Django's ValidationError for a refused name (forms, services)."""
        if (problem := self.problem(value)) is not None:
            raise ValidationError(problem, code="name")

    @property
    def help_text(self) -> str:
        """Lazy (a str proxy), so a form class built at import still speaks the viewer's language."""
        return lazy(self._help_text, str)()

    def _help_text(self) -> str:
        return gettext("At most %(limit)d characters: %(allowed)s.") % {
            "limit": self.limit,
            "allowed": self.allowed,
        }


DEPLOYMENT_NAME = NameRule(
    _("Deployment name"), 63, re.compile(r"[-A-Za-z0-9_]+"), _("letters a-z and A-Z, digits, - and _")
)
# Django's own username characters (UnicodeUsernameValidator), so the admin site and createsuperuser agree.
USERNAME = NameRule(_("User name"), 150, re.compile(r"[\w.@+-]+"), _("letters, digits and @ . + - _"))
TOKEN_NAME = NameRule(
    _("Token name"), 100, re.compile(r"[\w .:@/+-]+"), _("letters, digits, spaces and . : @ / + - _")
)


class NameFormField(forms.CharField):
    """A form field for a rule's name: no `maxlength` attribute, the rule's message on a bad name."""

    def __init__(self, rule: NameRule, **kwargs):
        self.rule = rule
        kwargs.setdefault("label", rule.label)
        kwargs.setdefault("help_text", rule.help_text)
        super().__init__(**kwargs)
        self.validators.append(rule.validate)

    def widget_attrs(self, widget):
        attrs = super().widget_attrs(widget)
        attrs.pop("maxlength", None)
        return attrs
