"""One launch loop for both runtimes (workers.tasks.deploy_launch): a real process started through the
process runtime's hooks, failing the ways an engine fails, and the toolkit's findings for this start only."""

import ast
import asyncio
import socket
import sys
from pathlib import Path

import pytest

from workers.agent_config import AgentConfig
from workers.engine.launch.command import Launch
from workers.engine.launch.launch_spec import launch_spec_from_payload
from workers.engine.running import runtime
from workers.hosts.local import LocalRunner
from workers.tasks.deploy import ProcessLaunch
from workers.tasks.deploy_launch import LaunchFailed

ROOT = Path(__file__).resolve().parents[2]


class Recorder:
    def __init__(self):
        self.events = []

    def emit(self, kind, **payload):
        self.events.append((kind, payload))

    def log(self, line, stream="stdout"):
        self.emit("log", line=line, stream=stream)

    def progress(self, percent, stage, **extra):
        self.emit("progress", percent=percent, stage=stage, **extra)

    def of(self, kind):
        return [payload for found, payload in self.events if found == kind]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class ScriptLaunch(ProcessLaunch):
    """The process runtime with its engine command replaced by a Python script (no vLLM stack here)."""

    script = ""

    async def prepare(self):
        payload = {"model_path": "/m", "served_model_name": "tiny", "port": free_port(), "chip": "cpu"}
        self.take(
            launch_spec_from_payload({**payload, "logic_ids": []}, log_path=self.log_path, venv_path="/v")
        )
        self.launch = Launch(argv=[sys.executable, "-c", self.script], env={}, log_path=self.log_path)
        return None


def launched(tmp_path, script: str, **payload):
    emitter = Recorder()
    launch = ScriptLaunch(
        emitter, AgentConfig(node_name="n1", host_root=str(tmp_path)), {"name": "d1", **payload}
    )
    launch.script = script
    with pytest.raises(LaunchFailed) as failed:
        asyncio.run(launch.run())
    return failed.value, emitter


def test_an_engine_that_dies_during_start_up_fails_with_its_findings_and_is_forgotten(tmp_path):
    script = (
        "print('INFO loading'); print('RuntimeError: NPU out of memory. Tried to allocate 4.00 GiB'); exit(1)"
    )
    error, emitter = launched(tmp_path, script)
    assert str(error) == "the engine exited during start-up"
    (result,) = emitter.of("result")
    assert [finding["code"] for finding in result["findings"]] == ["npu_oom"]
    assert error.hint == result["findings"][0]["hint"]
    assert "INFO loading" in [event["line"] for event in emitter.of("log")]
    assert runtime.load_record(str(tmp_path), "d1") is None


def test_an_engine_that_never_answers_is_stopped_and_forgotten_at_the_timeout(tmp_path):
    error, emitter = launched(
        tmp_path,
        "import time; print('INFO waiting', flush=True); time.sleep(60)",
        start_timeout_s=1,
        health_interval_s=0.2,
    )
    assert str(error) == "the engine did not answer /health within 1 s"
    pid = emitter.of("progress")[0]["runtime"]["pid"]
    assert not asyncio.run(LocalRunner().is_alive(pid))
    assert runtime.load_record(str(tmp_path), "d1") is None
    assert error.hint == "Read the engine log above for the first error."


def test_a_failed_start_reports_the_toolkits_findings_for_this_start_only(tmp_path):
    log = tmp_path / "engine.log"
    log.write_text("RuntimeError: NPU out of memory. Tried to allocate 2.00 GiB\n")  # an earlier run
    start = log.stat().st_size
    with log.open("a") as handle:
        handle.write("INFO starting\nRuntimeError: NPU out of memory. Tried to allocate 4.00 GiB\n")
    emitter = Recorder()
    launch = ProcessLaunch(emitter, AgentConfig(node_name="n1", host_root=str(tmp_path)), {"name": "d1"})
    launch.log_path = str(log)
    hint = launch.report_failure(start)
    (payload,) = emitter.of("result")
    assert [finding["code"] for finding in payload["findings"]] == ["npu_oom"]
    assert "4.00 GiB" in payload["findings"][0]["line"]
    assert payload["log_tail"][0] == "INFO starting"
    assert hint == payload["findings"][0]["hint"]


def test_the_container_launch_does_not_import_the_process_tasks():
    """deploy imports deploy_container to pick the runtime; the way back would be a circle."""
    tree = ast.parse((ROOT / "workers/tasks/deploy_container.py").read_text())
    imported = {
        node.module if isinstance(node, ast.ImportFrom) else alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.Import | ast.ImportFrom)
        for alias in node.names
    }
    assert "workers.tasks.deploy" not in imported
    from_tasks = [
        alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module == "workers.tasks"
        for alias in node.names
    ]
    assert "deploy" not in from_tasks


class SimEngineLaunch(ProcessLaunch):
    """The process runtime starting the simulated engine (workers.sim: vLLM's routes) on a fixed port, with
    the runtime's own liveness check deciding adoption."""

    port = 0

    async def prepare(self):
        payload = {"model_path": "/m", "served_model_name": "tiny", "port": self.port, "chip": "cpu"}
        self.take(
            launch_spec_from_payload({**payload, "logic_ids": []}, log_path=self.log_path, venv_path="/v")
        )
        argv = [sys.executable, "-m", "workers.sim.engine", "--port", str(self.port), "--host", "127.0.0.1",
                "--model", "/m", "--served-model-name", "tiny"]  # fmt: skip
        env = {"SIM_ENGINE_START_DELAY": "0.3", "SIM_ENGINE_TOKEN_DELAY": "0.001"}
        self.launch = Launch(argv=argv, env=env, log_path=self.log_path)
        existing = runtime.load_record(self.config.host_root, self.name)
        if existing is not None and existing.argv == argv and await self.still_serves(existing):
            return existing
        return None


def test_an_engine_that_answers_a_real_request_is_ready_and_the_next_launch_adopts_it(tmp_path):
    config = AgentConfig(node_name="n1", host_root=str(tmp_path))
    launches = [SimEngineLaunch(Recorder(), config, {"name": "d1", "health_interval_s": 0.1}) for _ in "12"]
    port = free_port()
    for launch in launches:
        launch.port = port

    async def twice():
        try:
            return await launches[0].run(), await launches[1].run()
        finally:
            await runtime.stop_engine(LocalRunner(), runtime.load_record(str(tmp_path), "d1"), 2)

    first, second = asyncio.run(twice())
    assert first["runtime"]["adopted"] is False
    assert second["runtime"]["adopted"] is True
    assert second["runtime"]["pid"] == first["runtime"]["pid"]
    for launch in launches:  # each asked for one real token: the start to be ready, the second to adopt
        assert "first request: answered" in [event["line"] for event in launch.emitter.of("log")]
