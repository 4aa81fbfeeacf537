"""Text that agents send in English, shown in the viewer's language.

Agents never import Django, so they mark their strings with gettext_noop and send them untranslated; the
panel translates at display time. Planner reasons carry their template and parameters so numbers are
filled in after translation."""

from django import template
from django.utils.translation import gettext

from panel.core.choices import OperationStatus
from panel.core.numbers import compact, is_big
from panel.core.translated import filled, in_language
from panel.deployments.reasons import current
from panel.deployments.rollouts import message_display
from panel.operations.texts import agent_text as translated_agent_text
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
    params = _field(reason, "params") or {}
    text = gettext(source)
    # Big counts ("%(tokens)d tokens") read as "113.0 M tokens", "55,192 sequences": their %d becomes %s of
    # the compact form.
    big = {name: compact(value) for name, value in params.items() if is_big(value)}
    for name in big:
        text = text.replace(f"%({name})d", f"%({name})s")
    try:
        return text % {**params, **big}
    except (KeyError, TypeError, ValueError):
        return message


@register.filter
def agent_text(text) -> str:
    """A stage title, error or hint written by an agent: translated where the catalog knows it."""
    return translated_agent_text(text)


@register.filter
def checklist_text(entry, field: str) -> str:
    """`detail` or `fix` of a preflight checklist line: its English template translated, then filled with its
    parameters; lines without a template (a version an agent read, lines stored before templates existed)
    are translated as they are, where the catalog knows them."""
    text = _field(entry, field, "") or ""
    source = (_field(entry, "templates") or {}).get(field)
    if not source:
        return agent_text(text)
    return filled(source, _field(entry, "params") or {}, fallback=text)


@register.filter
def deployment_reason(deployment) -> str:
    """A deployment's reason in the viewer's language: each of its parts (panel/deployments/reasons.py)
    translated where the catalog knows it, then filled with its values."""
    return in_language(current(deployment))


@register.filter
def rollout_message(rollout) -> str:
    """A rollout's message in the viewer's language, as `deployment_reason`."""
    return message_display(rollout)


@register.filter
def status_label(value: str) -> str:
    """A run's status (pending, running, succeeded, failed, cancelled) in the viewer's language."""
    return OperationStatus(value).label if value in OperationStatus.values else value
