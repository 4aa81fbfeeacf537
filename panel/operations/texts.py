"""Operation texts that agents write (stage titles, errors, hints, step titles) in the reader's language.

Agents never import Django: each text goes in English and, beside it in the payload's `texts`, as its msgid
and params (`{"msgid": ..., "params": {...}}`, a param that is a text nested the same way: workers.i18n).
The panel keeps both: an event's payload as it came, and on the operation row its stage, error and hint
with their structure in `Operation.texts`. Where a text is shown (pages through the agent_text filter, the
API, the websocket) its msgid is translated and filled with its values, each value that is a text in turn.
A text without a structure that still spells it (rows stored before agents sent one, texts the panel wrote
itself) is shown as the catalog's translation of the whole of it, or as it is.

What the API and the websocket give: `stage`, `error`, `hint` (and those fields and step titles in event
payloads) in the request's language, English unless Accept-Language or the language cookie asks for
another; and `texts`, the structured form as the agent sent it, for a client that translates itself.
"""

from typing import Any

from django.utils.translation import gettext, override

from panel.core.domain.translated import filled, safe_format
from workers.i18n import structured

AGENT_TEXT_FIELDS = ("stage", "error", "hint", "title")
# Payload lists of install steps ({"name", "title"}): the plan the agent announces.
STEP_LISTS = ("steps", "specs")
MAX_NESTING = 8


def is_structured(value) -> bool:
    if not isinstance(value, dict):
        return False
    return isinstance(value.get("msgid"), str) and isinstance(value.get("params"), dict)


def english(structure: dict, _depth: int = 0) -> str:
    """The English text a structure spells (what the agent sent beside it)."""
    return _filled(structure["msgid"], structure, english, _depth)


def in_language(structure: dict, _depth: int = 0) -> str:
    """A structured text in the active language: its msgid translated, then filled with its values."""
    msgid = structure["msgid"]
    return _filled(gettext(msgid) if msgid else msgid, structure, in_language, _depth)


def _filled(template: str, structure: dict, render, depth: int) -> str:
    params = {
        name: render(value, depth + 1) if is_structured(value) and depth < MAX_NESTING else value
        for name, value in structure["params"].items()
    }
    if not params:
        return template
    try:  # the msgid and its values are an agent's: never a format string (panel.core.domain.translated)
        return safe_format(template, params)
    except (KeyError, IndexError, ValueError, TypeError):
        # A translation that names another field than its msgid does is the catalog's mistake: English then.
        if template == structure["msgid"]:
            return template
        try:
            return safe_format(structure["msgid"], params)
        except (KeyError, IndexError, ValueError, TypeError):
            return structure["msgid"]


def agent_text(text: str, structure=None) -> str:
    """An agent's text in the active language: from its structure (sent beside it, or the Text's own) while
    that still spells the text (a stale one, the panel having written the field since, is ignored), else the
    catalog's translation of the whole text; a text the catalog does not know stays as it is."""
    if not text:
        return text
    if structure is None:  # a text of workers' pure modules the panel ran itself (a compatibility check)
        structure = structured(text)
    if is_structured(structure):
        try:
            if english(structure) == text:
                return in_language(structure)
        except (KeyError, IndexError, ValueError, TypeError):
            pass
    return gettext(text)


def kept(texts: dict | None, payload: dict, names: tuple[str, ...]) -> dict:
    """`texts` of an operation row after an event set `names` from `payload`: each one's structure as the
    event carried it, or none (a text sent without one)."""
    sent = _texts_of(payload)
    updated = {name: value for name, value in (texts or {}).items() if name not in names}
    updated.update({name: sent[name] for name in names if is_structured(sent.get(name))})
    return updated


def _texts_of(data: dict) -> dict:
    texts = data.get("texts")
    return texts if isinstance(texts, dict) else {}


def translated(data: dict) -> dict:
    """A copy of an operation summary or event payload with its agent texts in the active language (its
    `texts` say how each was made)."""
    found = [name for name in AGENT_TEXT_FIELDS if isinstance(data.get(name), str) and data[name]]
    lists = [name for name in STEP_LISTS if isinstance(data.get(name), list)]
    if not found and not lists:
        return data
    texts = _texts_of(data)
    changed: dict[str, Any] = {name: agent_text(data[name], texts.get(name)) for name in found}
    for name in lists:
        changed[name] = [
            {**step, "title": agent_text(step["title"], _texts_of(step).get("title"))}
            if isinstance(step, dict) and isinstance(step.get("title"), str)
            else step
            for step in data[name]
        ]
    return {**data, **changed}


def translated_message(message: dict, language: str) -> dict:
    """A websocket message of an operation with its agent texts in `language`: "operation.status" itself,
    "operation.events" in each event's payload. Other messages are returned as they are, untouched."""
    kind = message.get("type")
    if kind not in ("operation.status", "operation.events"):
        return message
    with override(language):
        if kind == "operation.status":
            return translated(message)
        events = [{**event, "payload": translated(event.get("payload") or {})} for event in message["events"]]
        return {**message, "events": events}


def checklist_text(entry: dict, field: str) -> str:
    """`detail` or `fix` of a checklist line (preflight, fabric check) in the active language: its English
    template translated, then filled with its parameters; a line without a template (a version an agent
    read, a line stored before templates existed) is translated as it is, where the catalog knows it."""
    text = entry.get(field) or ""
    source = (entry.get("templates") or {}).get(field)
    return filled(source, entry.get("params") or {}, fallback=text) if source else agent_text(text)
