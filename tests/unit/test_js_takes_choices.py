"""The scripts take statuses, colours and terminal sets from panel/core/domain/choices.py (written into every
page by templates/base.html, read by static/js/choices.js): a script with its own copy fails here, naming
it."""

import re
from pathlib import Path

from panel.core.domain.choices import (
    COLOUR_ALARM,
    COLOUR_OFFLINE,
    COLOUR_OK,
    COLOUR_RUNNING,
    COLOUR_WARNING,
    DeploymentState,
    NodeStatus,
    NpuHealth,
    OperationStatus,
    StepState,
)

SCRIPTS = Path(__file__).resolve().parents[2] / "static" / "js"
THE_ONE_READER = "choices.js"
COLOURS = {COLOUR_OK, COLOUR_WARNING, COLOUR_ALARM, COLOUR_OFFLINE, COLOUR_RUNNING}
STATUS_SETS = [
    set(choices.values) for choices in (OperationStatus, DeploymentState, NodeStatus, NpuHealth, StepState)
]
STATUSES = set().union(*STATUS_SETS)
# `failed: "alarm"`, `"OK": "ok"`: a status given its colour.
COLOUR_ENTRY = re.compile(r"""(?<=[{,])\s*["']?(\w+)["']?\s*:\s*["'](\w+)["']""")
# `["succeeded", "failed", "cancelled"]`, `new Set([...])`: a list of quoted words.
QUOTED_LIST = re.compile(r"""\[\s*((?:["'][\w-]+["']\s*,\s*)+["'][\w-]+["'])\s*,?\s*\]""")


def copies_in(text: str) -> list[str]:
    """The hard-coded status colours and status sets in a script's text."""
    found = [
        match.group(0)
        for match in COLOUR_ENTRY.finditer(text)
        if match.group(1) in STATUSES and match.group(2) in COLOURS
    ]
    for match in QUOTED_LIST.finditer(text):
        words = set(re.findall(r"""["']([\w-]+)["']""", match.group(1)))
        if any(words <= statuses for statuses in STATUS_SETS):
            found.append(match.group(0))
    return found


def test_no_script_keeps_its_own_status_colours_or_status_sets():
    copies = {
        script.name: copies_in(script.read_text(encoding="utf-8"))
        for script in sorted(SCRIPTS.glob("*.js"))
        if script.name != THE_ONE_READER
    }
    assert {name: found for name, found in copies.items() if found} == {}


def test_the_check_sees_the_copies_the_scripts_used_to_keep():
    assert copies_in('const colours = { pending: "offline", running: "running", succeeded: "ok" };')
    assert copies_in('const terminal = new Set(["succeeded", "failed", "cancelled"]);')
    assert copies_in('const healthColours = { OK: "ok", Warning: "warning" };')
    assert not copies_in('["warning", "alarm"].includes(colour("deployment", status))')
    assert not copies_in('setStatus(this.connection, silent ? "offline" : "ok");')
    assert not copies_in('for (const key of ["total", "free", "busy", "unhealthy", "offline"]) {}')
