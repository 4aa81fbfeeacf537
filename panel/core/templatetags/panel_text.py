"""Text that agents send in English, shown in the viewer's language.

Agents never import Django, so they mark their strings with gettext_noop and send them untranslated; the
panel translates at display time. Planner reasons carry their template and parameters so numbers are
filled in after translation."""

from django import template
from django.utils.translation import gettext

from workers.engine.plan_reasons import TEMPLATES

register = template.Library()


def _field(item, name, default=None):
    return item.get(name, default) if isinstance(item, dict) else getattr(item, name, default)


@register.filter
def reason_text(reason) -> str:
    """A planner reason: its template translated, then filled with its parameters."""
    message = _field(reason, "message", "") or ""
    source = TEMPLATES.get(_field(reason, "code", ""))
    if source is None:
        return message
    try:
        return gettext(source) % (_field(reason, "params") or {})
    except (KeyError, TypeError, ValueError):
        return message


@register.filter
def agent_text(text) -> str:
    """A stage title, error or hint written by an agent: translated where the catalog knows it."""
    return gettext(text) if text else text
