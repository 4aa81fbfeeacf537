"""Page links of server-side paginated lists that keep the list's filters (templates/includes/pager.html)."""

from django import template
from django.core.paginator import Paginator

register = template.Library()


@register.simple_tag(takes_context=True)
def page_url(context, number) -> str:
    """This page's URL with `page` set to `number` and every other query parameter (the filters) kept."""
    query = context["request"].GET.copy()
    query["page"] = number
    return f"?{query.urlencode()}"


@register.simple_tag
def page_numbers(page) -> list:
    """Page numbers to link around the current one, with Paginator.ELLIPSIS where some are left out."""
    return list(page.paginator.get_elided_page_range(page.number, on_each_side=2, on_ends=1))


@register.filter
def is_gap(number) -> bool:
    return number == Paginator.ELLIPSIS
