"""The API's field for a name people choose (panel.core.domain.names holds the rules): the schema shows the
limit and, where a JSON Schema pattern can say it, the characters; a bad name gets the rule's own message."""

from django.core.validators import MaxLengthValidator, RegexValidator
from rest_framework import serializers
from rest_framework.exceptions import ValidationError as ApiValidationError

from panel.core.domain.names import NameRule


class _DocumentedLimit(MaxLengthValidator):
    """The limit as the schema generator reads it (maxLength); the rule's own check refuses, with its message,
    so DRF's "no more than N characters" does not come beside it."""

    def __call__(self, value):
        return None


class _DocumentedPattern(RegexValidator):
    """The characters as the schema generator reads them (pattern); the rule's own check refuses."""

    def __call__(self, value):
        return None


class NameField(serializers.CharField):
    """An API field for a rule's name; the schema shows the limit and, where a JSON Schema pattern can say
    it, the characters; a bad name gets the rule's message."""

    def __init__(self, rule: NameRule, **kwargs):
        self.rule = rule
        kwargs.setdefault("help_text", rule.help_text)
        super().__init__(**kwargs)
        self.max_length = rule.limit
        self.validators.extend([_DocumentedLimit(rule.limit), self._check])
        # JSON Schema's patterns are ECMA-262, where \w means ASCII only: a rule that takes any letter
        # (Python's \w) would be documented narrower than it is, so such a rule states its characters in
        # its help text only.
        if "\\w" not in rule.pattern.pattern:
            self.validators.append(_DocumentedPattern(f"^{rule.pattern.pattern}$"))

    def _check(self, value: str) -> None:
        if (problem := self.rule.problem(value)) is not None:
            raise ApiValidationError(problem, code="name")
