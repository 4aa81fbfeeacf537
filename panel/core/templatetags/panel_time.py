"""One way to show a moment on every page: `{{ value|when }}`.

It renders <time datetime="ISO 8601">server text</time>; static/js/page.js (localizeTimes) rewrites the text
in the viewer's locale and time zone, with the full date as a tooltip, so every date on every page reads the
same. The server text (Django's SHORT_DATETIME_FORMAT in the active language) is what shows without
JavaScript. None or an empty value renders "—".
"""

from django import template
from django.template.defaultfilters import date as date_filter
from django.utils.html import format_html

register = template.Library()


@register.filter(is_safe=True)
def when(value, shape: str = ""):
    """`shape`: "" (date and time), "date", "time" or "relative", as localizeTimes reads data-format."""
    if not value:
        return "—"
    text = date_filter(value, "SHORT_DATE_FORMAT" if shape == "date" else "SHORT_DATETIME_FORMAT")
    if shape:
        return format_html('<time datetime="{}" data-format="{}">{}</time>', value.isoformat(), shape, text)
    return format_html('<time datetime="{}">{}</time>', value.isoformat(), text)
