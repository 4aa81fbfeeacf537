"""Operation texts that agents write (stage titles, errors, hints) in the reader's language.

Agents never import Django: they mark these strings with gettext_noop (workers.i18n) and send them in
English. Pages translate them at render time (the agent_text filter); the API and the websocket use these
helpers, so a page that updates live shows the same words it shows after a reload.
"""

import re
from functools import lru_cache

from django.utils.translation import get_language, gettext, override
from django.utils.translation.trans_real import translation

AGENT_TEXT_FIELDS = ("stage", "error", "hint", "title")
# Payload lists of install steps ({"name", "title"}): the plan the agent announces.
STEP_LISTS = ("steps", "specs")
PLACEHOLDER = re.compile(r"\{(\w+)\}")
MAX_NESTING = 2


@lru_cache(maxsize=8)
def _formatted_msgids(language: str) -> tuple[tuple[re.Pattern, str], ...]:
    """(pattern, msgid) for each catalog msgid with str.format fields ("Install vLLM {v}"): agents fill those
    in before sending, so the panel recognises the filled text and translates the template instead."""
    found = []
    for msgid in translation(language)._catalog.keys():  # noqa: SIM118  a TranslationCatalog has no __iter__
        if not isinstance(msgid, str) or "{" not in msgid:
            continue
        names = PLACEHOLDER.findall(msgid)
        if not names or len(set(names)) != len(names):
            continue
        pattern = "".join(
            f"(?P<{piece}>.+?)" if index % 2 else re.escape(piece)
            for index, piece in enumerate(PLACEHOLDER.split(msgid))
        )
        found.append((re.compile(pattern, re.DOTALL), msgid))
    # The most specific template first: "step {step}: {message}" before "{title}: {hint}".
    return tuple(sorted(found, key=lambda item: -len(PLACEHOLDER.sub("", item[1]))))


def agent_text(text: str, _depth: int = 0) -> str:
    """A text an agent sent in English (gettext_noop'd, maybe filled with str.format) in the active
    language; a text the catalog does not know stays as it is.

    Saved errors and hints are often put together from such texts — "step {step}: {message}", a hint per
    line, "{title}: {hint}" — so the values a template was filled with are translated in turn, and a text
    of several lines line by line. A template that is only punctuation counts only when a value of it was
    translated (it would change nothing but the colon)."""
    if not text:
        return text
    known = gettext(text)
    if known != text:
        return known
    if "\n" in text:
        return "\n".join(agent_text(line, _depth) for line in text.split("\n"))
    for pattern, msgid in _formatted_msgids(get_language() or "en"):
        match = pattern.fullmatch(text)
        if match is None:
            continue
        values = match.groupdict()
        if _depth < MAX_NESTING:
            values = {name: agent_text(value, _depth + 1) for name, value in values.items()}
        if not _has_words(msgid) and values == match.groupdict():
            continue
        try:
            return gettext(msgid).format(**values)
        except (KeyError, IndexError, ValueError):
            return text
    return text


def _has_words(msgid: str) -> bool:
    return any(char.isalpha() for char in PLACEHOLDER.sub("", msgid))


def translated(data: dict) -> dict:
    """A copy of an operation summary or event payload with its agent texts in the active language; texts
    the catalog does not know (an error with a path in it, say) stay as they are."""
    found = [name for name in AGENT_TEXT_FIELDS if isinstance(data.get(name), str) and data[name]]
    lists = [name for name in STEP_LISTS if isinstance(data.get(name), list)]
    if not found and not lists:
        return data
    changed = {name: agent_text(data[name]) for name in found}
    for name in lists:
        changed[name] = [
            {**step, "title": agent_text(step["title"])}
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
