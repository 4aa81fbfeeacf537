"""What the CLI's integration tests share: the real `ascend-panel`, run as a subprocess the way a CI job
runs it (`python -m panel.cli`, the console script's main), against the browser tier's live panel (real
web server, panel worker, beat and an agent on the simulated A2 host sim-a2; tests/browser/conftest.py)."""

import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

from tests.deployment_helpers import free_port_pair

REPO = Path(__file__).resolve().parents[2]
SIM_NODE = "sim-a2"
MODEL = "tiny-chat"  # the demo model the live panel registers on sim-a2 (ensure_demo_models)


@dataclass
class Cli:
    """`ascend-panel` with its own config directory and no ASCEND_PANEL_* from the outer environment."""

    url: str
    home: Path

    def env(self, **extra) -> dict:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("ASCEND_PANEL_", "DJANGO_"))}
        return {**env, "PYTHONPATH": str(REPO), "XDG_CONFIG_HOME": str(self.home), "LANG": "C.UTF-8", **extra}

    def argv(self, *args) -> list[str]:
        return [sys.executable, "-m", "panel.cli", *args]

    def run(self, *args, input=None, timeout=300, **env) -> subprocess.CompletedProcess:
        return subprocess.run(
            self.argv(*args),
            cwd=REPO,
            env=self.env(**env),
            input=input,
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def start(self, *args, **env) -> subprocess.Popen:
        return subprocess.Popen(
            self.argv(*args), cwd=REPO, env=self.env(**env), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True,
        )  # fmt: skip

    def login(self, user: str = "bob") -> subprocess.CompletedProcess:
        done = self.run("login", self.url, "--username", user, "--password-stdin", input=f"{user}-password\n")
        assert done.returncode == 0, done.stderr
        return done


def wait_until(check, timeout: float, what: str, every: float = 0.5):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(every)
    raise AssertionError(f"{what} within {timeout:.0f} s")


def ready_model(client: httpx.Client) -> dict:
    """The demo model once its copy on sim-a2 is inspected and ready to deploy."""

    last = {}

    def ready():
        answer = client.get(f"/api/v1/models/{MODEL}/")
        last["answer"] = f"{answer.status_code} {answer.text[:600]}"
        model = answer.json() if answer.status_code == 200 else None
        return model if model and any(a["ready"] for a in model["artifacts"]) else None

    try:
        return wait_until(ready, 120, f"{MODEL} was not ready on {SIM_NODE}")
    except AssertionError as error:
        raise AssertionError(f"{error}; the last answer: {last.get('answer')}") from None


def free_npu(client: httpx.Client) -> int:
    """An NPU of sim-a2 no deployment holds (stopped ones keep theirs)."""
    listed = client.get("/api/v1/deployments/", params={"page_size": 1000}).json()["results"]
    held = {n["logic_id"] for d in listed for n in d["npus"] if n["node"] == SIM_NODE}
    return next(i for i in range(8) if i not in held)


def deployment_port() -> int:
    """A port free on this machine, and the next one (the engine takes both): sim engines are real
    processes, and other panels' engines may hold the planner's default."""
    return free_port_pair()
