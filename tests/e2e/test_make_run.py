"""`make run` (python -m panel.run) as a new admin meets it: a short console (the children's start-up banners
go to the log files) ending in one summary block, a generated chat model on every sim host that deploys
offline (on both sim hosts at once, though another program holds the port the panel would pick first), and
Ctrl-C leaving no engine behind while the deployment keeps its desired state: the next start
runs it again. `kill -INT` sent to make's own process stops everything too."""

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading

import httpx
import pytest

from tests.conftest import REPO, _free_port
from tests.deployment_helpers import free_port_pair, kill_recorded_engines, wait_for

pytestmark = pytest.mark.timeout(400)
PASSWORD = "make-run-test-password"


def _hears_ctrl_c():
    """In the child, before exec: SIGINT as a terminal's Ctrl-C delivers it. A child inherits its parent's
    ignored signals and signal mask, and after the rest of the suite the test process may have either (in the
    full run make run never heard the test's SIGINT; alone it did)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


class RunCommand:
    """panel.run in its own session, its output (and its children's) collected line by line."""

    def __init__(self, data_dir, port: int, engine_port: int, argv: list[str] | None = None):
        env = {
            k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "DATABASE_URL", "CELERY_BROKER_URL")
        }
        env.update(
            PANEL_DATA_DIR=str(data_dir),
            PANEL_PORT=str(port),
            PANEL_ADMIN_PASSWORD=PASSWORD,
            PANEL_DEPLOY_BASE_PORT=str(engine_port),
        )
        self.lines: list[str] = []
        self.process = subprocess.Popen(
            argv or [sys.executable, "-m", "panel.run"],
            cwd=REPO,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
            preexec_fn=_hears_ctrl_c,
        )
        threading.Thread(target=self._collect, daemon=True).start()

    def _collect(self):
        for line in self.process.stdout:
            self.lines.append(line.rstrip("\n"))

    def summary(self) -> list[str]:
        starts = [i for i, line in enumerate(self.lines) if "Ascend Panel is running at" in line]
        if not starts:
            return []
        block = self.lines[starts[0] - 1 :]
        ends = [i for i, line in enumerate(block) if i > 0 and line.startswith("─")]
        return block[: ends[0] + 1] if ends else []

    def interrupt(self, exit_code: int = 0):
        """SIGINT to the process started (Ctrl-C for panel.run), and wait until make run has stopped
        programs, Redis, then engines (slow under load)."""
        self.process.send_signal(signal.SIGINT)
        try:
            code = self.process.wait(180)
        except subprocess.TimeoutExpired:
            raise AssertionError(
                "make run did not stop; its output ends:\n" + "\n".join(self.lines[-40:])
            ) from None
        assert code == exit_code, self.lines[-40:]

    def kill(self):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)


def listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def test_make_run_serves_its_generated_model_and_ctrl_c_stops_the_engine_too(tmp_path):
    port, engine_port = _free_port(), free_port_pair()
    run = RunCommand(tmp_path, port, engine_port)
    squatter = socket.socket()
    try:
        block = wait_for(run.summary, 240, f"the summary block; output so far: {run.lines[-30:]}", every=1)
        text = "\n".join(block)
        assert f"http://127.0.0.1:{port}/" in text
        assert "PANEL_ADMIN_PASSWORD" in text
        assert "tiny-chat" in text
        assert "sim-a2, sim-duo" in text
        before = run.lines[: run.lines.index(block[0])]
        assert len([line for line in before if line.strip()]) <= 5, before  # no banners on the console
        assert "[queues]" in (tmp_path / "logs" / "panel-worker.log").read_text()  # they are in the logs
        assert f"Logs:      {tmp_path / 'logs'}/" in text

        api = httpx.Client(base_url=f"http://127.0.0.1:{port}", auth=("admin", PASSWORD), timeout=20)
        models = api.get("/api/v1/models/").raise_for_status().json()["results"]
        tiny = next(m for m in models if m["name"] == "tiny-chat")
        copies = {a["node"]: a for a in tiny["artifacts"]}
        assert sorted(copies) == ["sim-a2", "sim-duo"]
        assert all(a["ready"] for a in copies.values())
        assert tiny["facts"]["has_chat_template"] is True

        # Another program holds the first port the panel would pick, and both sim hosts (one address,
        # 127.0.0.1) get a deployment at once with Port left empty: each ends on a port that is really free.
        squatter.bind(("127.0.0.1", engine_port))
        squatter.listen()
        ids = {}
        for name, node in (("first", "sim-a2"), ("second", "sim-duo")):
            body = {
                "name": name,
                "model": tiny["id"],
                "artifact": copies[node]["id"],
                "nodes": [{"node": node, "npus": [0]}],
            }
            created = api.post("/api/v1/deployments/", json=body)
            assert created.status_code == 201, created.text
            ids[name] = created.json()["id"]
        for name, deployment in ids.items():
            wait_for(
                lambda d=deployment: api.get(f"/api/v1/deployments/{d}/").json()["status"] == "running",
                120,
                f"{name} running",
                every=1,
            )
        ports = {name: api.get(f"/api/v1/deployments/{d}/").json()["spec"]["port"] for name, d in ids.items()}
        assert engine_port not in ports.values(), ports
        assert ports["first"] != ports["second"], ports
        assert all(listening(p) for p in ports.values())
        pk, served_on = ids["first"], ports["first"]
        assert api.delete(f"/api/v1/deployments/{ids['second']}/").status_code in (202, 204)
        wait_for(
            lambda: not listening(ports["second"]), 60, "the second deployment's engine stopped", every=1
        )
        api.close()

        run.interrupt()
        assert not listening(served_on), "the engine outlived make run"
        records = list((tmp_path / "sim/sim-a2/var/lib/ascend-panel/deployments").glob("*.json"))
        assert [r.stem for r in records] == ["first"]  # kept: the next start restarts what should run

        run = RunCommand(tmp_path, port, engine_port)  # the next `make run`
        wait_for(run.summary, 240, "the summary block of the second start", every=1)
        api = httpx.Client(base_url=f"http://127.0.0.1:{port}", auth=("admin", PASSWORD), timeout=20)
        assert [m["name"] for m in api.get("/api/v1/models/").json()["results"]].count("tiny-chat") == 1
        wait_for(lambda: listening(served_on), 90, "the deployment's engine started again", every=1)
        wait_for(lambda: api.get(f"/api/v1/deployments/{pk}/").json()["status"] == "running", 60, "running")
        api.close()
        run.interrupt()
        assert not listening(served_on)
    finally:
        squatter.close()
        run.kill()
        for node in ("sim-a2", "sim-duo"):
            kill_recorded_engines(tmp_path / "sim" / node)


def make_run_argv() -> list[str]:
    """`make run` as typed, with the Makefile's install step taken as done (the venv is this one)."""
    with (REPO / "pyproject.toml").open("rb") as pyproject:
        stamp = subprocess.run(["cksum"], stdin=pyproject, capture_output=True, text=True).stdout.split()[0]
    return ["make", "--no-print-directory", "-o", f".venv/.installed-{stamp}", "run", f"PY={sys.executable}"]


def test_kill_int_to_makes_own_process_stops_everything(tmp_path):
    port, engine_port = _free_port(), free_port_pair()
    run = RunCommand(tmp_path, port, engine_port, argv=make_run_argv())
    try:
        wait_for(run.summary, 240, f"the summary block; output so far: {run.lines[-30:]}", every=1)
        assert listening(port)
        # make does not pass SIGINT on; the panel sees make handle it, stops, and make ends with it.
        run.interrupt(exit_code=-signal.SIGINT)
        assert "Stopping…" in run.lines
        assert not listening(port)
    finally:
        run.kill()
        for node in ("sim-a2", "sim-duo"):
            kill_recorded_engines(tmp_path / "sim" / node)
