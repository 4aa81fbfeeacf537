"""The launch part of the review: which CPU binder and why, and the chip recipe's variables with reasons.

The plan's reasons (review["warnings"]) carry them as codes from workers.engine.planner.plan_reasons; this
splits them out of the general list so the review shows them as their own blocks, per node where nodes differ.
"""

from __future__ import annotations

from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from workers.engine.launch.binder import ENGINE, NONE, NUMACTL

BINDER_LABELS = {
    ENGINE: gettext_lazy("vllm-ascend binds its own CPUs"),
    NUMACTL: gettext_lazy("numactl binds the engine"),
    NONE: gettext_lazy("No CPU binding"),
}
# The reason that says which binder acted; the other binding reasons give the cause.
BINDER_OF = {
    "cpu_binding_engine": ENGINE,
    "cpu_binding_user_on": ENGINE,
    "cpu_binding_numactl": NUMACTL,
    "cpu_binding_unbound": NONE,
}
RECIPE_CODES = ("recipe_env", "recipe_env_overridden", "env_user")
YOURS = ("recipe_env_overridden", "env_user")


def launch_context(warnings: list[dict]) -> dict:
    """{"bindings": [{node, binder, label, reasons}], "recipes": [...], "notes": [...], "other": [...]}."""
    bindings: dict[str, dict] = {}
    recipes, notes, other = [], [], []
    for item in warnings:
        code = item.get("code", "")
        params = item.get("params") or {}
        if code.startswith("cpu_binding_"):
            node = item.get("node") or ""
            entry = bindings.setdefault(node, {"node": node, "binder": NONE, "reasons": []})
            entry["reasons"].append(item)
            if code in BINDER_OF:
                entry["binder"] = BINDER_OF[code]
        elif code in RECIPE_CODES:
            recipes.append(_recipe_row(item, params, overridden=code in YOURS))
        elif code == "recipe_note":
            notes.append({"why": _(params.get("why", "")), "recipe": _(params.get("recipe", ""))})
        else:
            other.append(item)
    for entry in bindings.values():
        entry["label"] = BINDER_LABELS[entry["binder"]]
    return {"bindings": list(bindings.values()), "recipes": recipes, "notes": notes, "other": other}


def _recipe_row(item: dict, params: dict, overridden: bool) -> dict:
    return {
        "node": item.get("node") or "",
        "name": params.get("name", ""),
        "value": params.get("value", ""),
        "default": params.get("default", ""),
        "why": _(params.get("why", "")),
        "recipe": _(params["recipe"]) if params.get("recipe") else "",
        "sources": params.get("sources") or [],
        "overridden": overridden,
    }
