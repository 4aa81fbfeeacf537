"""Spec files (docs/cli.md): YAML or JSON, one deployment per document; `-` is stdin."""

import sys
from pathlib import Path

import yaml

from panel.cli.errors import UsageError


def read_specs(source: str) -> list[dict]:
    """Every document of the file, in order. Anything unreadable is a usage error: nothing was sent."""
    where = "stdin" if source == "-" else source
    try:
        text = sys.stdin.read() if source == "-" else Path(source).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise UsageError(f"Cannot read {where}: {error}") from None
    try:
        documents = [doc for doc in yaml.safe_load_all(text) if doc is not None]
    except yaml.YAMLError as error:
        raise UsageError(f"{where} is not valid YAML: {error}") from None
    if not documents:
        raise UsageError(f"{where} holds no spec.")
    for index, doc in enumerate(documents):
        label = f"{where}, document {index + 1}" if len(documents) > 1 else where
        if not isinstance(doc, dict):
            raise UsageError(f"{label}: a spec is a mapping of keys (name, model, placement …).")
        name = doc.get("name")
        if isinstance(name, bool) or not isinstance(name, str | int) or name == "":
            raise UsageError(f"{label}: the spec has no name.")
    names = [str(doc["name"]) for doc in documents]
    twice = sorted({name for name in names if names.count(name) > 1})
    if twice:
        raise UsageError(f"{where} names {', '.join(twice)} more than once.")
    return documents
