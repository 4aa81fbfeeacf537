from django import template

from panel.core.domain.numbers import compact

register = template.Library()


@register.filter
def count(value) -> str:
    """A token or request count the way the viewer's language reads big numbers ("1.2 M", "12.3 万")."""
    return compact(value)
