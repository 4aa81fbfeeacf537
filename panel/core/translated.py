"""Texts kept in English with their parameters (a deployment's reason, a rollout's message: lists of parts,
panel/deployments/reasons.py), shown in the viewer's language: each part translated where the catalog knows
it, then filled."""

from django.utils.translation import gettext


def in_language(parts: list[dict]) -> str:
    """Reason parts (panel/deployments/reasons.py), each translated where the catalog knows it and filled."""
    return " ".join(filled(p["text"], p["params"], fallback=p["text"]) for p in parts)


def filled(template: str, params: dict, fallback: str) -> str:
    """`template` translated, then filled with `params` (values as they are: names, paths, numbers)."""
    if not template:
        return fallback
    try:
        return gettext(template).format(**params) if params else gettext(template)
    except (KeyError, IndexError, ValueError):
        return fallback
