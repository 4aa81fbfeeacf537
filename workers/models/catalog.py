"""The starter catalog of models served on Ascend (catalog.yaml beside this file)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

CATALOG_PATH = Path(__file__).with_name("catalog.yaml")
# Every entry carries the inspect_model() facts, so the planner treats catalog and local models alike.
FACT_KEYS = (
    "architecture",
    "model_type",
    "params",
    "weights_bytes",
    "dtype",
    "hidden_size",
    "num_layers",
    "num_attention_heads",
    "num_kv_heads",
    "head_dim",
    "vocab_size",
    "max_position_embeddings",
    "moe",
    "mla",
    "quantization",
    "has_tokenizer",
    "has_chat_template",
)
REQUIRED_KEYS = ("id", "hub", "source", "weights_bytes_source", *FACT_KEYS)


class CatalogError(ValueError):
    """catalog.yaml is malformed; the message names the entry and the missing field."""


def load_catalog(path: str | Path = CATALOG_PATH) -> list[dict[str, Any]]:
    """All catalog entries, checked to carry every inspect fact plus hub ids and sources."""
    entries = yaml.safe_load(Path(path).read_text(encoding="utf-8")) or []
    if not isinstance(entries, list):
        raise CatalogError(f"{path}: the catalog must be a list of models")
    seen: set[str] = set()
    for position, entry in enumerate(entries):
        name = (
            entry.get("id", f"entry #{position + 1}") if isinstance(entry, dict) else f"entry #{position + 1}"
        )
        if not isinstance(entry, dict):
            raise CatalogError(f"{path}: {name} is not a mapping")
        missing = [key for key in REQUIRED_KEYS if key not in entry]
        if missing:
            raise CatalogError(f"{path}: {name} lacks {', '.join(missing)}")
        if name in seen:
            raise CatalogError(f"{path}: {name} appears twice")
        seen.add(name)
        hub = entry["hub"] or {}
        if not (hub.get("huggingface") or hub.get("modelscope")):
            raise CatalogError(f"{path}: {name} names no Hugging Face or ModelScope id")
    return entries


def find_model(model_id: str, path: str | Path = CATALOG_PATH) -> dict[str, Any] | None:
    """The entry whose id or hub id is `model_id`, or None."""
    for entry in load_catalog(path):
        hub_ids = {value for value in (entry["hub"] or {}).values() if value}
        if model_id == entry["id"] or model_id in hub_ids:
            return entry
    return None
