"""Engines as managed processes: state files, log reading by offset, stop with grace, adoption."""

import asyncio
import os
import signal
import socket
import subprocess
import sys
import time

from workers.engine.launch.command import build_launch
from workers.engine.launch.launch_spec import launch_spec_from_payload
from workers.engine.running import runtime
from workers.hosts.local import LocalRunner


def test_log_reading_returns_whole_lines_and_resumes_where_it_stopped(tmp_path):
    log = tmp_path / "engine.log"
    log.write_text("one\ntwo\nthr")
    lines, offset = runtime.read_log(str(log), 0)
    assert lines == ["one", "two"]
    with log.open("a") as handle:
        handle.write("ee\nfour\n")
    lines, offset = runtime.read_log(str(log), offset)
    assert lines == ["three", "four"]
    assert runtime.read_log(str(log), offset) == ([], offset)


def test_a_truncated_log_is_read_again_from_its_start(tmp_path):
    log = tmp_path / "engine.log"
    log.write_text("new\n")
    assert runtime.read_log(str(log), 10_000) == (["new"], 4)


def test_state_records_survive_a_round_trip_and_are_forgotten(tmp_path):
    record = runtime.EngineRecord(name="qwen", pid=4242, port=8000, log_path="/x.log", argv=["python"])
    runtime.save_record(str(tmp_path), record)
    assert runtime.load_record(str(tmp_path), "qwen") == record
    runtime.forget_record(str(tmp_path), "qwen")
    assert runtime.load_record(str(tmp_path), "qwen") is None


def test_stop_ends_a_process_that_ignores_sigterm_with_sigkill(tmp_path):
    stubborn = (
        "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('up', flush=True); "
        "time.sleep(60)"
    )

    async def scenario():
        runner = LocalRunner()
        record = await runtime.start_engine(
            runner,
            str(tmp_path),
            "stubborn",
            [sys.executable, "-c", stubborn],
            {},
            str(tmp_path / "s.log"),
            9,
        )
        for _ in range(50):
            if "up" in (tmp_path / "s.log").read_text():
                break
            await asyncio.sleep(0.1)
        outcome = await runtime.stop_engine(runner, record, grace_s=0.5)
        return outcome, await runner.is_alive(record.pid)

    assert asyncio.run(scenario()) == ("killed", False)


def test_a_dead_recorded_engine_is_not_adopted(tmp_path):
    async def scenario():
        runner = LocalRunner()
        record = await runtime.start_engine(
            runner, str(tmp_path), "short", [sys.executable, "-c", "pass"], {}, str(tmp_path / "e.log"), 9
        )
        for _ in range(50):
            if not await runner.is_alive(record.pid):
                break
            await asyncio.sleep(0.1)
        return await runtime.adoptable(runner, runtime.load_record(str(tmp_path), "short"), "tiny")

    assert asyncio.run(scenario()) is False


def test_a_running_engine_that_does_not_answer_health_is_not_adopted_unless_a_headless_follower(tmp_path):
    async def scenario():
        runner = LocalRunner()
        record = await runtime.start_engine(
            runner, str(tmp_path), "quiet", ["sleep", "30"], {}, str(tmp_path / "q.log"), free_port()
        )
        try:
            return (
                await runtime.adoptable(runner, record, "tiny"),
                await runtime.adoptable(runner, record, "tiny", follower=True),
            )
        finally:
            await runtime.stop_engine(runner, record, grace_s=0.5)

    assert asyncio.run(scenario()) == (False, True)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_the_panel_payload_becomes_a_cpu_launch_without_set_env_scripts():
    payload = {"model_path": "/m", "served_model_name": "tiny", "port": 8000, "chip": "cpu", "logic_ids": []}
    spec = launch_spec_from_payload(payload, log_path="/l.log", venv_path="/v", set_env_scripts=("/s.sh",))
    launch = build_launch(spec)
    assert launch.argv[:3] == ["/v/bin/python", "-m", "vllm.entrypoints.openai.api_server"]
    assert "bash" not in launch.argv
    assert "VLLM_CPU_KVCACHE_SPACE" in launch.env


def test_a_dead_engines_surviving_workers_are_ended_with_its_process_group(tmp_path):
    """vLLM's API server killed with -9 leaves its EngineCore child in the same process group."""
    # A leader that starts a long-lived child in its own new session, then is killed with -9.
    leader = subprocess.Popen(
        [sys.executable, "-c", "import subprocess, time; subprocess.Popen(['sleep', '300']); time.sleep(99)"],
        start_new_session=True,
    )
    time.sleep(0.5)
    children = subprocess.run(["pgrep", "-g", str(leader.pid)], capture_output=True, text=True).stdout.split()
    assert len(children) == 2
    os.kill(leader.pid, signal.SIGKILL)
    leader.wait()
    assert subprocess.run(["pgrep", "-g", str(leader.pid)], capture_output=True).returncode == 0

    asyncio.run(runtime.end_orphaned_group(LocalRunner(), leader.pid))

    assert wait_until_group_is_gone(leader.pid)


def wait_until_group_is_gone(pgid: int, timeout: float = 5.0) -> bool:
    """True once no live (non-zombie) process is left in the group."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        states = subprocess.run(["ps", "-o", "stat=", "-g", str(pgid)], capture_output=True, text=True).stdout
        if all(state.startswith("Z") for state in states.split()):
            return True
        time.sleep(0.1)
    return False
