"""Texts kept in English with their parameters (a deployment's reason, a rollout's message: lists of parts,
panel/deployments/reasons.py), shown in the viewer's language: each part translated where the catalog knows
it, then filled.

Templates and their values often come from agents (an operation's stage and error, a checklist line's
`templates`, a failed fabric check's detail): data, never a format string. `safe_format` fills only plain
`{name}` fields, and a number's precision (`{seconds:.0f}`); an attribute or an index (`{p.__class__}`,
`{p[0]}`), a conversion, a width (`{p:>999999999}` asks for a gigabyte) or a positional field raises
ValueError, and every reader then shows its fallback."""

import re
import string

from django.utils.translation import gettext

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")
_NUMBER_SPEC = re.compile(r"(\.[0-9])?[fdg%]?")  # precision and type only: no fill, no width
MAX_FILLED = 8192  # characters of a filled text


def safe_format(template: str, params: dict) -> str:
    """`template` with each `{name}` replaced by `params[name]`: the one kind of formatting a text from an
    agent may ask for. Raises KeyError for a name params lacks and ValueError for anything else."""
    out = []
    for literal, field, spec, conversion in string.Formatter().parse(template):
        out.append(literal)
        if field is None:
            continue
        if not _NAME.fullmatch(field) or conversion:
            raise ValueError(f"{{{field}}} is not a plain field")
        value = params[field]
        if spec:
            if (
                not _NUMBER_SPEC.fullmatch(spec)
                or isinstance(value, bool)
                or not isinstance(value, int | float)
            ):
                raise ValueError(f"{{{field}:{spec}}} is not a number's precision")
            out.append(format(value, spec))
        else:
            out.append(str(value))
        if sum(map(len, out)) > MAX_FILLED:
            raise ValueError(f"the text grows past {MAX_FILLED} characters")
    return "".join(out)


def in_language(parts: list[dict]) -> str:
    """Reason parts (panel/deployments/reasons.py), each translated where the catalog knows it and filled."""
    return " ".join(filled(p["text"], p["params"], fallback=p["text"]) for p in parts)


def filled(template: str, params: dict, fallback: str) -> str:
    """`template` translated, then filled with `params` (values as they are: names, paths, numbers)."""
    if not template:
        return fallback
    try:
        return safe_format(gettext(template), params) if params else gettext(template)
    except (KeyError, IndexError, ValueError):
        return fallback
