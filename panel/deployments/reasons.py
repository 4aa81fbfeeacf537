"""A deployment's reason and a rollout's message, kept in parts so pages show them in the viewer's language.

Each part is an English template (a msgid, `{name}` placeholders) and its parameters; the parts joined by
spaces spell `Deployment.reason`, the English text the API, the websocket and the logs carry. Writers that
set only `reason` (the admin, older rows) are fine: parts that no longer spell it are ignored."""

from typing import Any

from django.utils.translation import gettext_noop

from panel.core.domain.translated import safe_format


def part(template: str, **params: Any) -> dict:
    return {"text": template, "params": params}


def as_parts(reason: str | list[dict]) -> list[dict]:
    """A reason given as text (one untranslatable-or-catalogued part) or as parts."""
    if isinstance(reason, list):
        return reason
    return [part(reason)] if reason else []


def english(parts: list[dict]) -> str:
    """The parts' English text; a part whose template its values do not fill (an agent's text with braces:
    never a format string, panel.core.domain.translated) shows as it came."""
    return " ".join(_english(p) for p in parts)


def _english(part: dict) -> str:
    if not part["params"]:
        return part["text"]
    try:
        return safe_format(part["text"], part["params"])
    except (KeyError, ValueError):
        return part["text"]


def spelled(parts: list[dict] | None, text: str) -> list[dict]:
    """`text` as parts: the stored `parts` while they still spell it, else the text as one part (someone set
    only the text)."""
    return parts if parts and english(parts) == text else as_parts(text)


def current(deployment) -> list[dict]:
    """The deployment's reason as parts."""
    return spelled(deployment.reason_parts, deployment.reason)


def gave_up(reason: str | list[dict], failed_restarts: int) -> list[dict]:
    return [*as_parts(reason), part(gettext_noop("Gave up after {n} failed restarts."), n=failed_restarts)]


def launch_failed(error: str, hint: str) -> list[dict]:
    """An agent's error and hint, each its own part (translated where the catalog knows it)."""
    return [part(error), *([part("—"), part(hint)] if hint else [])]
