"""Text that agents send in English, shown in the viewer's language.

Agents never import Django, so they mark their strings with gettext_noop and send them untranslated; the
panel translates at display time. Planner reasons carry their template and parameters so numbers are
filled in after translation."""

from django import template
from django.utils.translation import gettext

from panel.core.domain.choices import OperationStatus
from panel.core.domain.numbers import compact, is_big
from panel.core.domain.translated import in_language
from panel.deployments.reasons import current
from panel.deployments.rollouts.rollouts import message_display
from panel.operations import texts
from panel.operations.texts import agent_text as translated_agent_text
from workers.engine.planner.plan_reasons import TEMPLATES

register = template.Library()
# Reason parameters that are texts rather than figures or names.
TEXT_PARAMS = ("recipe", "why")


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
    # A chip recipe's title and reasons are English sentences of their own (recipes.yaml, in the catalog):
    # filled in as they are, a Chinese page read "Atlas 300I (310P): Computes in float16 only: …".
    params = {name: gettext(v) if name in TEXT_PARAMS and v else v for name, v in params.items()}
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
    """A text an agent wrote, kept without its msgid and params (a finding's title or hint): the catalog's
    translation of the whole of it, where it knows it."""
    return translated_agent_text(text)


@register.filter
def agent_field(item, name: str) -> str:
    """Field `name` (stage, error, hint, title) of an operation or a step an agent sent, in the viewer's
    language: from its msgid and params in the item's `texts` (`{{ operation|agent_field:"error" }}`)."""
    structures = _field(item, "texts") or {}
    structure = structures.get(name) if isinstance(structures, dict) else None
    return translated_agent_text(_field(item, name, "") or "", structure)


@register.filter
def checklist_text(entry: dict, field: str) -> str:
    """`detail` or `fix` of a checklist line in the viewer's language (panel.operations.texts)."""
    return texts.checklist_text(entry, field)


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
    return str(OperationStatus(value).label) if value in OperationStatus.values else value
