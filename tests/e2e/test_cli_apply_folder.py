"""`ascend-panel apply --wait` of a spec that names only a folder the panel does not know yet: the folder
is registered, the apply waits for its inspection on the node (and says so), then deploys and waits for the
engine, against the live panel and the real agent on sim-a2."""

import subprocess
import sys
import uuid

import pytest
import yaml

from tests.integration.cli_live import REPO, SIM_NODE, Cli, deployment_port, free_npu

NAME = "cli-folder"


@pytest.fixture(scope="module")
def panel(request):
    return request.getfixturevalue("browser_tier_panel")


@pytest.fixture(scope="module")
def cli(panel, tmp_path_factory):
    cli = Cli(panel.url, tmp_path_factory.mktemp("cli-folder") / "config")
    cli.login("bob")
    yield cli
    cli.run("delete", NAME, "--wait", "--timeout", "2m", "--ignore-not-found")


def test_apply_wait_registers_a_new_folder_waits_for_its_inspection_then_deploys(cli, panel, tmp_path):
    folder = f"/data/models/cli-folder-{uuid.uuid4().hex[:6]}"
    subprocess.run(
        [sys.executable, "-m", "workers.models.tiny", str(panel.sim_root(SIM_NODE) / folder.lstrip("/"))],
        cwd=REPO,
        check=True,
        capture_output=True,
        timeout=120,
    )
    with panel.api("bob") as client:
        npu = free_npu(client)
    spec = {
        "name": NAME,
        "path": folder,
        "placement": {"node": SIM_NODE, "npus": [npu]},
        "engine": {"max_model_len": 512, "port": deployment_port()},
    }
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(spec))

    done = cli.run("apply", "-f", str(path), "--wait", "--timeout", "4m")
    assert done.returncode == 0, f"stdout: {done.stdout}\nstderr: {done.stderr}"
    lines = done.stdout.splitlines()
    assert lines[0].startswith(f"{NAME}: waiting for the inspection of its model (operation "), lines
    assert lines[1:] == [f"{NAME}: inspected; applying", f"{NAME}: created", f"{NAME}: running"], lines
    again = cli.run("apply", "-f", str(path))
    assert again.stdout == f"{NAME}: unchanged\n", again.stdout
