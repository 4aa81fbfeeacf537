"""Labels (`app: chat`, `example.com/tier: prod`) and label selectors (`app=chat,tier!=dev,gpu,!canary`),
with the rules Kubernetes gives label keys and values, so that people who write kubectl selectors write
ours the same way.

A key is an optional prefix (a DNS subdomain: at most 253 characters of lower-case letters, digits, "-" and
".", each dot-separated part beginning and ending with a letter or digit) and "/", then a name of at most
63 characters of letters, digits, "-", "_" and ".", beginning and ending with a letter or digit. A value is
empty or made like a name. Whatever breaks a rule is refused with a message naming the key and the rule,
never cut to fit.

A selector is requirements joined by commas, all of which must hold: `key=value` (or `==`), `key!=value`
(also true where the key is missing, as in Kubernetes), `key` (the key is there) and `!key` (it is not).
"""

import re
from dataclasses import dataclass

from django.db.models import Q
from django.db.models.fields.json import KeyTextTransform
from django.db.models.lookups import Exact
from django.utils.translation import gettext as _

NAME_LIMIT = 63
PREFIX_LIMIT = 253
MAX_LABELS = 64  # a bound for the row and the list filter, far above what people attach
NAME = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9_.-]*[A-Za-z0-9])?")
PREFIX = re.compile(r"[a-z0-9](?:[a-z0-9-]*[a-z0-9])?(?:\.[a-z0-9](?:[a-z0-9-]*[a-z0-9])?)*")

EQUALS, NOT_EQUALS, EXISTS, MISSING = "=", "!=", "exists", "!"


def key_problem(key) -> str | None:
    """Why `key` is not a label key, or None."""
    if not isinstance(key, str) or not key:
        return _("A label key may not be empty.")
    prefix, slash, name = key.rpartition("/")
    if slash and not prefix:
        return _("Label key “{key}”: the prefix before “/” may not be empty.").format(key=key)
    if prefix and (len(prefix) > PREFIX_LIMIT or not PREFIX.fullmatch(prefix)):
        return _(
            "Label key “{key}”: the prefix “{prefix}” must be a DNS subdomain: at most 253 characters of "
            "lower-case letters, digits, “-” and “.”, each part beginning and ending with a letter or digit."
        ).format(key=key, prefix=prefix)
    if len(name) > NAME_LIMIT or not NAME.fullmatch(name):
        return _(
            "Label key “{key}”: the name “{name}” must be 1 to 63 characters of letters, digits, “-”, "
            "“_” and “.”, beginning and ending with a letter or digit (an optional prefix: example.com/name)."
        ).format(key=key, name=name)
    return None


def value_problem(key: str, value) -> str | None:
    """Why `value` cannot be the value of label `key`, or None."""
    if not isinstance(value, str):
        shown = str(value).lower() if isinstance(value, bool) else "" if value is None else str(value)
        return _('Label “{key}”: the value must be text; quote it: "{value}".').format(key=key, value=shown)
    if value and (len(value) > NAME_LIMIT or not NAME.fullmatch(value)):
        return _(
            "Label “{key}”: the value “{value}” must be empty or 1 to 63 characters of letters, digits, "
            "“-”, “_” and “.”, beginning and ending with a letter or digit."
        ).format(key=key, value=value)
    return None


def label_problems(labels) -> list[str]:
    """Every reason `labels` is not a mapping of label keys to values (empty: it is one)."""
    if not isinstance(labels, dict):
        return [_("Labels are a mapping of keys to values, such as {app: chat}.")]
    if len(labels) > MAX_LABELS:
        return [_("At most {limit} labels; there are {count}.").format(limit=MAX_LABELS, count=len(labels))]
    problems = []
    for key, value in labels.items():
        problem = key_problem(key) or value_problem(key, value)
        if problem:
            problems.append(problem)
    return problems


@dataclass(frozen=True)
class Requirement:
    key: str
    operator: str  # EQUALS, NOT_EQUALS, EXISTS or MISSING
    value: str = ""

    def matches(self, labels: dict) -> bool:
        if self.operator == EQUALS:
            return labels.get(self.key) == self.value
        if self.operator == NOT_EQUALS:
            return labels.get(self.key) != self.value
        return (self.key in labels) == (self.operator == EXISTS)

    def as_q(self, field: str) -> Q:
        has_key = Q(**{f"{field}__has_key": self.key})
        if self.operator == EXISTS:
            return has_key
        if self.operator == MISSING:
            return ~has_key
        # Compared as text through a key transform: any key, dots and slashes too, on SQLite and PostgreSQL.
        equal = Q(Exact(KeyTextTransform(self.key, field), self.value))
        if self.operator == EQUALS:
            return has_key & equal
        return ~has_key | (has_key & ~equal)  # a missing key is "not equal", and NULL compares to nothing


SELECTOR_HELP = "key=value,key!=value,key,!key"  # syntax: the same in every language


def parse_selector(text: str) -> list[Requirement]:
    """The requirements of a selector; ValueError with the reason for one that is not a selector."""
    if "(" in text or ")" in text:
        message = _("Set-based selectors (key in (a,b)) are not supported; write {forms}.")
        raise ValueError(message.format(forms=SELECTOR_HELP))
    requirements = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            raise ValueError(_("An empty requirement in “{selector}”; write {forms}.").format(
                selector=text, forms=SELECTOR_HELP))  # fmt: skip
        requirements.append(_requirement(part))
    return requirements


def _requirement(part: str) -> Requirement:
    for operator, token in ((NOT_EQUALS, "!="), (EQUALS, "=="), (EQUALS, "=")):
        if token in part:
            key, _token, value = (piece.strip() for piece in part.partition(token))
            if any(char in value for char in "=!"):
                raise ValueError(_("“{part}” has more than one operator.").format(part=part))
            if problem := key_problem(key) or value_problem(key, value):
                raise ValueError(problem)
            return Requirement(key, operator, value)
    operator, key = (MISSING, part[1:].strip()) if part.startswith("!") else (EXISTS, part)
    if problem := key_problem(key):
        raise ValueError(problem)
    return Requirement(key, operator)


def selector_q(requirements: list[Requirement], field: str = "labels") -> Q:
    q = Q()
    for requirement in requirements:
        q &= requirement.as_q(field)
    return q
