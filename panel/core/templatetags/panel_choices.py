"""The statuses, colours and terminal sets of panel.core.domain.choices, written once into every page for its
scripts (static/js/choices.js), so no script keeps a copy that could drift."""

from django import template
from django.utils.html import json_script

from panel.core.domain.choices import for_browser

register = template.Library()


@register.simple_tag
def choices_script() -> str:
    return json_script(for_browser(), "panel-choices")
