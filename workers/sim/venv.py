"""A sim host's serving venv: opt/ascend-panel/venvs/sim, where the install would put the real one.

Its bin/python runs this interpreter with the vllm shim (workers/sim/vllm_shim) first on the path, so the
agent starts `python -m vllm.entrypoints.openai.api_server` exactly as on a real host and gets the sim
engine. The stack record beside it is what the agent reads to find the venv (workers.engine.launch.stack).
"""

import json
import sys
from pathlib import Path

SIM_VENV = Path("opt/ascend-panel/venvs/sim")
SHIM = Path(__file__).resolve().parent / "vllm_shim"
REPO_ROOT = Path(__file__).resolve().parents[2]

# Every value is written by the sim itself (paths of this checkout and the sim root), none from a user.
PYTHON_WRAPPER = """#!/bin/sh
# Written by `python -m workers.sim create`: python with the sim's vllm shim first on the path.
PYTHONPATH={path}${{PYTHONPATH:+:$PYTHONPATH}} ASCEND_PANEL_SIM_ROOT={root} exec {python} "$@"
"""


def _quoted(text: str) -> str:
    return "'" + text.replace("'", "'\\''") + "'"


def write_sim_venv(root: Path) -> Path:
    venv = root.resolve() / SIM_VENV
    (venv / "bin").mkdir(parents=True, exist_ok=True)
    wrapper = venv / "bin" / "python"
    wrapper.write_text(
        PYTHON_WRAPPER.format(
            path=_quoted(f"{SHIM}:{REPO_ROOT}"),
            root=_quoted(str(root.resolve())),
            python=_quoted(sys.executable),
        )
    )
    wrapper.chmod(0o755)
    python = f"{sys.version_info[0]}.{sys.version_info[1]}"
    record = {"profile": "sim", "venv": str(venv), "python": python, "set_env": []}
    (venv / "ascend-panel-stack.json").write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")
    return venv
