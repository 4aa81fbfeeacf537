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


# What each link type of `npu-smi info -t topo` means, fastest first; the colour says how good it is for
# tensor parallelism (HCCS and SIO carry collectives on chip; PCIe paths do not).
LINK_KINDS = (
    ("HCCS", gettext_lazy("HCCS (Huawei Cache Coherence System)"), "ok"),
    ("SIO", gettext_lazy("SIO: between the two dies of one NPU"), "ok"),
    ("UB", gettext_lazy("Unified Bus"), "ok"),
    ("HCCS_SW", gettext_lazy("HCCS through a switch"), "ok"),
    ("PIX", gettext_lazy("PCIe, at most one bridge"), "warning"),
    ("PXB", gettext_lazy("PCIe, several bridges"), "warning"),
    ("PHB", gettext_lazy("PCIe through the host bridge"), "warning"),
    ("SYS", gettext_lazy("PCIe across NUMA nodes"), "alarm"),
    ("NA", gettext_lazy("Unknown"), "unknown"),
)
_LINK_COLOUR = {kind: colour for kind, _label, colour in LINK_KINDS}


def topology_view(topology) -> dict | None:
    """The NPU link matrix for the node page, or None when the inventory has none (older drivers). Only
    strings reach the page: the matrix comes from the node's own report."""
    if not isinstance(topology, dict) or not isinstance(topology.get("links"), dict):
        return None
    devices = [str(d) for d in topology.get("devices") or [] if isinstance(d, str)]
    links, affinity = topology["links"], topology.get("cpu_affinity") or {}
    rows: list[dict] = []
    for device in devices:
        row = links.get(device) if isinstance(links.get(device), dict) else {}
        cells = []
        for other in devices:
            link = str(row.get(other) or "NA")
            cells.append(
                {"link": link, "colour": "self" if link == "X" else _LINK_COLOUR.get(link, "unknown")}
            )
        rows.append({"device": device, "cells": cells, "affinity": str(affinity.get(device) or "")})
    seen = {cell["link"] for row in rows for cell in row["cells"]}
    return {
        "devices": devices,
        "rows": rows,
        "has_affinity": bool(affinity),
        "legend": [
            {"link": kind, "label": label, "colour": colour}
            for kind, label, colour in LINK_KINDS
            if kind in seen
        ],
    }
