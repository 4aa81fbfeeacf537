"""Spec files (docs/cli.md): YAML or JSON, one deployment per document; `-` is stdin; a folder is every
*.yaml, *.yml and *.json file in it, in name order (with `recursive`, its subfolders' too)."""

import sys
from dataclasses import dataclass
from pathlib import Path

import yaml

from panel.cli.errors import UsageError

SPEC_SUFFIXES = (".yaml", ".yml", ".json")


@dataclass(frozen=True)
class Spec:
    source: str  # the file it came from ("stdin" for -)
    body: dict

    @property
    def name(self) -> str:
        return str(self.body["name"])


def read_specs(source: str, recursive: bool = False) -> list[dict]:
    """Every document of the file (or of each file of the folder), in order. Anything unreadable is a usage
    error: nothing was sent."""
    return [spec.body for spec in read_sources(source, recursive)]


def read_sources(source: str, recursive: bool = False) -> list[Spec]:
    """As read_specs, each spec with the file it came from; a name given twice, in one file or in two,
    is refused before anything is sent."""
    if source != "-" and Path(source).is_dir():
        files = spec_files(Path(source), recursive)
        if not files:
            found = "or its subfolders " if recursive else ""
            raise UsageError(f"{source} {found}holds no *.yaml, *.yml or *.json file.")
        specs = [spec for path in files for spec in _read_file(str(path))]
    else:
        specs = _read_file(source)
    seen: dict[str, str] = {}
    for spec in specs:
        if spec.name in seen:
            if seen[spec.name] == spec.source:
                raise UsageError(f"{spec.source} names {spec.name} more than once.")
            raise UsageError(f"{seen[spec.name]} and {spec.source} both name {spec.name}.")
        seen[spec.name] = spec.source
    return specs


def spec_files(folder: Path, recursive: bool) -> list[Path]:
    """The folder's spec files by name (a subfolder's after the files beside it, with `recursive`); hidden
    files (an editor's .swp, .git) are left out."""
    entries = sorted(folder.iterdir(), key=lambda path: path.name)
    files = [
        path
        for path in entries
        if path.is_file() and path.suffix.lower() in SPEC_SUFFIXES and not path.name.startswith(".")
    ]
    if recursive:
        for sub in entries:
            if sub.is_dir() and not sub.name.startswith("."):
                files += spec_files(sub, recursive)
    return files


def _read_file(source: str) -> list[Spec]:
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
    return [Spec(where, doc) for doc in documents]
