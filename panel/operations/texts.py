"""Operation texts that agents write (stage titles, errors, hints) in the reader's language.

Agents never import Django: they mark these strings with gettext_noop (workers.i18n) and send them in
English. Pages translate them at render time (the agent_text filter); the API and the websocket use these
helpers, so a page that updates live shows the same words it shows after a reload.
"""

from django.utils.translation import gettext, override

AGENT_TEXT_FIELDS = ("stage", "error", "hint")


def translated(data: dict) -> dict:
    """A copy of an operation summary or event payload with its agent texts in the active language; texts
    the catalog does not know (an error with a path in it, say) stay as they are."""
    found = [name for name in AGENT_TEXT_FIELDS if isinstance(data.get(name), str) and data[name]]
    if not found:
        return data
    return {**data, **{name: gettext(data[name]) for name in found}}


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
