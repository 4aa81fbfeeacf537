"""Texts agents show people, sent as their English template and its values so the panel translates them.

workers/ never imports Django. `gettext_noop` (imported as `_`) marks a msgid and returns it as a `Text`;
its `.format(**params)` gives another `Text`: the English sentence, an ordinary str to every reader (logs,
the CLI, an older panel), that also keeps its msgid and params. `structured(text)` is that pair,
`{"msgid": ..., "params": {...}}`, a value that is itself a Text nested the same way; `with_texts` adds it
to an event payload beside the English field (in the payload's `texts`), and the panel fills the msgid's
translation with its values where the text is shown (panel.operations.texts). Texts joined with `+` or
`join_lines` stay structured; anything else done to one (slicing, an f-string) leaves plain English.
"""

from __future__ import annotations

import string
from collections.abc import Iterable
from typing import Any

import yaml

# Payload fields that hold a text a person reads, and payload lists whose items hold such fields.
TEXT_FIELDS = ("stage", "error", "hint", "title")
TEXT_LISTS = ("steps", "specs", "plan", "findings")
_FORMATTER = string.Formatter()


class Text(str):
    """An English text that remembers the msgid it was made from and the values it was filled with."""

    msgid: str
    params: dict[str, Any]

    def __new__(cls, english: str, msgid: str | None = None, params: dict[str, Any] | None = None):
        text = super().__new__(cls, english)
        text.msgid = english if msgid is None else msgid
        text.params = params or {}
        return text

    def format(self, *args, **params) -> str:
        english = str.format(self, *args, **params)
        if args:  # positional fields have no names to send; the text goes as English
            return english
        named = {name for _, name, _, _ in _FORMATTER.parse(self.msgid) if name}
        return Text(english, self.msgid, {name: params[name] for name in named if name in params})

    def __add__(self, other):
        if not isinstance(other, str):
            return NotImplemented
        return _joined([self, other], "")

    def __radd__(self, other):
        if not isinstance(other, str):
            return NotImplemented
        return _joined([other, self], "")


# A Text is written as the str it is wherever YAML is written safely (the API's YAML answers, the CLI).
yaml.SafeDumper.add_representer(Text, yaml.representer.SafeRepresenter.represent_str)


def gettext_noop(msgid: str) -> Text:
    """Mark `msgid` for the catalog (makemessages reads `_("...")`); the panel translates it when shown."""
    return Text(msgid)


def _joined(parts: list[str], separator: str) -> Text:
    names = [f"p{index}" for index in range(len(parts))]
    msgid = separator.join("{" + name + "}" for name in names)
    return Text(separator.join(parts), msgid, dict(zip(names, parts, strict=True)))


def join_lines(texts: Iterable[str]) -> str:
    """Lines joined by newlines, each one translated on its own where it is shown."""
    texts = list(texts)
    return _joined(texts, "\n") if len(texts) > 1 else (texts[0] if texts else "")


def message_of(error: BaseException) -> str:
    """An exception's message, keeping the Text it was raised with (str(error) is plain English)."""
    first = error.args[0] if len(error.args) == 1 else None
    return first if isinstance(first, Text) and str(error) == first else str(error)


def structured(value) -> dict | None:
    """`{"msgid", "params"}` of a Text (params: JSON values, a Text nested the same way); None for a plain
    str, which is shown as it is or as the catalog's translation of the whole of it."""
    if not isinstance(value, Text):
        return None
    return {"msgid": value.msgid, "params": {name: _param(item) for name, item in value.params.items()}}


def _param(value):
    if isinstance(value, Text):
        return structured(value)
    if value is None or isinstance(value, bool | int | float):
        return value
    return str(value)


def with_texts(payload: dict) -> dict:
    """The payload with a `texts` entry ({field: structured}) for each of its TEXT_FIELDS that is a Text,
    the items of its TEXT_LISTS and its `result` likewise; the English fields stay as they were."""
    texts = {name: structured(payload[name]) for name in TEXT_FIELDS if isinstance(payload.get(name), Text)}
    lists: dict[str, Any] = {
        name: [with_texts(item) if isinstance(item, dict) else item for item in payload[name]]
        for name in TEXT_LISTS
        if isinstance(payload.get(name), list)
    }
    if isinstance(payload.get("result"), dict):  # a run's outcome, a preflight's plan among it
        lists["result"] = with_texts(payload["result"])
    if not texts and not lists:
        return payload
    return {**payload, **lists, **({"texts": texts} if texts else {})}
