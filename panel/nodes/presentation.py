"""Shapes Node.facts, versions and inventory_changes (from workers.inventory) for the node page."""

from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

# The stack in the order an admin reads it, bottom up; anything else found follows, sorted.
VERSION_ORDER = (
    ("driver", gettext_lazy("Driver")),
    ("firmware", gettext_lazy("Firmware")),
    ("cann-toolkit", gettext_lazy("CANN toolkit")),
    ("cann-kernels", gettext_lazy("CANN kernels")),
    ("nnal", gettext_lazy("NNAL")),
    ("torch", "torch"),
    ("torch-npu", "torch-npu"),
    ("vllm", "vllm"),
    ("vllm-ascend", "vllm-ascend"),
)


def versions_view(versions: dict) -> list[dict]:
    known = dict(VERSION_ORDER)
    rows = [{"name": name, "label": label, "version": versions.get(name)} for name, label in VERSION_ORDER]
    rows += [{"name": n, "label": n, "version": v} for n, v in sorted(versions.items()) if n not in known]
    return rows


def facts_view(facts: dict) -> dict:
    """The facts with defaults for anything an older or partial inventory lacks."""
    return {
        "os": (facts.get("os") or {}).get("pretty_name") or (facts.get("os") or {}).get("name") or "",
        "kernel": facts.get("kernel") or "",
        "arch": facts.get("arch") or "",
        "cpu": facts.get("cpu") or {},
        "numa_nodes": facts.get("numa_nodes") or [],
        "memory": facts.get("memory") or {},
        "hugepages": facts.get("hugepages") or [],
        "disks": facts.get("disks") or [],
        "pythons": facts.get("pythons") or [],
        "python_stacks": facts.get("python_stacks") or {},
        "present": bool(facts),
    }


def inventory_changes_view(changes: dict) -> list[dict]:
    """One row per change since the previous inventory: what, before, after."""
    rows = []
    for name, (before, after) in sorted((changes.get("versions") or {}).items()):
        rows.append({"what": name, "before": before, "after": after, "kind": _("version")})
    for key in changes.get("facts") or []:
        rows.append({"what": key, "before": None, "after": None, "kind": _("facts")})
    for chip in changes.get("npus_added") or []:
        rows.append({"what": f"NPU {chip}", "before": None, "after": _("added"), "kind": _("NPU")})
    for chip in changes.get("npus_removed") or []:
        rows.append({"what": f"NPU {chip}", "before": _("present"), "after": _("gone"), "kind": _("NPU")})
    return rows
