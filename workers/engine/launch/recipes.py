"""Chip recipes (recipes.yaml): environment defaults per chip and shape, each with its reason and source;
and the serving recipes per hardware and model that the catalog lists and searches (`search_serving`).

`recipe_items` picks the entries that apply to one node's launch; `apply_recipes` lays the user's env
overrides over them and turns variables vllm-ascend now reads from additional_config into config keys on
the releases that want them there. What comes back is the launch's extra environment, the
additional_config keys, and one reason per entry for the review.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from workers.engine.launch.launch_matrix import config_value, env_moved_to_config, within
from workers.engine.planner.plan_hardware import HARDWARE
from workers.engine.planner.plan_reasons import Reason, reason

RECIPES_PATH = Path(__file__).with_name("recipes.yaml")
DEEPSEEK = "deepseek"
HCCL_BUFFSIZE = "HCCL_BUFFSIZE"
DEFAULT_HCCL_BUFFSIZE_MB = 200  # CANN's default (HCCL_BUFFSIZE reference)


class RecipeError(ValueError):
    """recipes.yaml is malformed; the message names the recipe."""


@dataclass(frozen=True)
class RecipeContext:
    chip: str
    multi_node: bool = False
    family: str | None = None
    node_ip: str | None = None
    ifname: str | None = None
    vllm_ascend: str | None = None


@dataclass(frozen=True)
class RecipeItem:
    recipe: str  # the recipe's title
    name: str  # env name; "" for a note
    value: str
    why: str
    sources: tuple[str, ...]


@dataclass
class Applied:
    env: dict[str, str] = field(default_factory=dict)
    additional_config: dict[str, Any] = field(default_factory=dict)
    reasons: list[Reason] = field(default_factory=list)


@cache
def load() -> list[dict[str, Any]]:
    recipes = yaml.safe_load(RECIPES_PATH.read_text(encoding="utf-8"))["recipes"]
    for recipe in recipes:
        if not recipe.get("sources") or not recipe.get("title") or not recipe.get("when"):
            where = f"{RECIPES_PATH.name}: recipe {recipe.get('id')!r}"
            raise RecipeError(f"{where} needs title, when and sources")
        for entry in recipe.get("env") or ():
            if not entry.get("name") or "value" not in entry or not entry.get("why"):
                where = f"{RECIPES_PATH.name}: recipe {recipe['id']!r}"
                raise RecipeError(f"{where} has an entry without name, value or why")
    return recipes


def model_family(facts: dict[str, Any]) -> str | None:
    """ "deepseek" for DeepSeek V2 / V3 / R1 checkpoints (what the DeepSeek recipes are written for)."""
    text = f"{facts.get('architecture') or ''} {facts.get('model_type') or ''}".lower()
    return DEEPSEEK if "deepseek" in text else None


def _applies(when: dict[str, Any], ctx: RecipeContext) -> bool:
    if "chips" in when and ctx.chip not in [str(chip) for chip in when["chips"]]:
        return False
    if "multi_node" in when and bool(when["multi_node"]) != ctx.multi_node:
        return False
    return "family" not in when or when["family"] == ctx.family


def _filled(value: str, ctx: RecipeContext) -> str | None:
    text = str(value)
    for placeholder, known in (("{node_ip}", ctx.node_ip), ("{ifname}", ctx.ifname)):
        if placeholder in text:
            if not known:
                return None
            text = text.replace(placeholder, known)
    return text


def recipe_items(ctx: RecipeContext) -> list[RecipeItem]:
    """Entries of every recipe that applies, later recipes replacing earlier ones' variables."""
    chosen: dict[str, RecipeItem] = {}
    notes: list[RecipeItem] = []
    for recipe in load():
        if not _applies(recipe["when"], ctx):
            continue
        sources = tuple(recipe["sources"])
        for entry in recipe.get("env") or ():
            if entry.get("family") and entry["family"] != ctx.family:
                continue
            if entry.get("since") and within(ctx.vllm_ascend, since=entry["since"]) is False:
                continue
            value = _filled(entry["value"], ctx)
            if value is not None:
                item = RecipeItem(recipe["title"], entry["name"], value, entry["why"], sources)
                chosen[entry["name"]] = item
        notes.extend(RecipeItem(recipe["title"], "", "", note, sources) for note in recipe.get("notes") or ())
    return [*chosen.values(), *notes]


def apply_recipes(items: list[RecipeItem], user_env: dict[str, str], vllm_ascend: str | None) -> Applied:
    """The launch's env and additional_config from the recipe entries and the user's overrides."""
    applied = Applied(env=dict(user_env))
    recipe_names = {item.name for item in items}
    for name, value in user_env.items():
        if name not in recipe_names:
            applied.reasons.append(reason("env_user", "info", name=name, value=value))
    for item in items:
        if not item.name:
            note = {"recipe": item.recipe, "why": item.why, "sources": list(item.sources)}
            applied.reasons.append(reason("recipe_note", "info", **note))
            continue
        params = {"name": item.name, "recipe": item.recipe, "why": item.why, "sources": list(item.sources)}
        if item.name in user_env:
            overridden = {**params, "value": user_env[item.name], "default": item.value}
            applied.reasons.append(reason("recipe_env_overridden", "info", **overridden))
            continue
        moved = env_moved_to_config(vllm_ascend, item.name)
        if moved is not None:
            value = config_value(moved, item.value)
            applied.additional_config[moved["key"]] = value
            shown = {**params, "name": f"additional_config.{moved['key']}", "value": str(value).lower()}
            applied.reasons.append(reason("recipe_env", "info", **shown))
            continue
        applied.env[item.name] = item.value
        applied.reasons.append(reason("recipe_env", "info", **params, value=item.value))
    return applied


def hccl_buffsize_mb(env: dict[str, str]) -> int:
    """HCCL_BUFFSIZE as the engine will see it (MB), CANN's 200 when unset or unreadable."""
    try:
        value = int(str(env.get(HCCL_BUFFSIZE, DEFAULT_HCCL_BUFFSIZE_MB)).strip())
    except ValueError:
        return DEFAULT_HCCL_BUFFSIZE_MB
    return value if value >= 1 else DEFAULT_HCCL_BUFFSIZE_MB


# Serving recipes (recipes.yaml `serving:`): what the sources run per hardware and model, for the catalog.
SERVING_FIELDS = ("id", "title", "hardware", "models", "quantization", "topology", "sources")


@cache
def serving_recipes() -> tuple[dict[str, Any], ...]:
    """The serving recipes, checked: every one names its hardware, models, topology and sources."""
    recipes = yaml.safe_load(RECIPES_PATH.read_text(encoding="utf-8")).get("serving") or []
    for recipe in recipes:
        missing = [name for name in SERVING_FIELDS if not recipe.get(name)]
        if missing or recipe["hardware"] not in HARDWARE:
            where = f"{RECIPES_PATH.name}: serving recipe {recipe.get('id')!r}"
            raise RecipeError(f"{where} needs {', '.join(SERVING_FIELDS)} and a known hardware")
    return tuple(recipes)


def _searched_text(recipe: dict[str, Any]) -> str:
    parts = [recipe["id"], recipe["title"], recipe["hardware"], recipe["quantization"], *recipe["models"]]
    parts += [*(recipe.get("flags") or ()), *(recipe.get("env") or ()), *(recipe.get("notes") or ())]
    parts.append(yaml.safe_dump(recipe["topology"]))
    return " ".join(str(part) for part in parts).lower()


def search_serving(query: str = "", hardware: str = "") -> list[dict[str, Any]]:
    """Serving recipes for `hardware` (an id, or all) holding every word of `query` (any case)."""
    words = query.lower().split()
    return [
        recipe
        for recipe in serving_recipes()
        if (not hardware or recipe["hardware"] == hardware)
        and all(word in _searched_text(recipe) for word in words)
    ]


def serving_for(facts: dict[str, Any], name: str = "") -> list[dict[str, Any]]:
    """The serving recipes written for this model: one of their `models` words is in its architecture,
    model type or name."""
    text = f"{facts.get('architecture') or ''} {facts.get('model_type') or ''} {name}".lower()
    return [recipe for recipe in serving_recipes() if any(word in text for word in recipe["models"])]
