"""A stop names the engine by pid and process start time (workers.engine.running.runtime,
workers.tasks.deploy): the agent stops only the process it recorded, a stop naming another engine or a bare
pid stops nothing and says so, and a pid the kernel handed out again to another process is never signalled."""

import subprocess

import pytest

from workers.engine.running import runtime
from workers.hosts.local import LocalRunner
from workers.hosts.sync_loop import run_coroutine_sync
from workers.tasks.deploy import engine_to_stop


def record(pid: int, pid_start: int, name: str = "d1") -> runtime.EngineRecord:
    return runtime.EngineRecord(
        name=name, pid=pid, port=1, log_path="/dev/null", argv=["x"], pid_start=pid_start
    )


@pytest.fixture
def engine():
    process = subprocess.Popen(["sleep", "600"], start_new_session=True)
    yield process
    process.kill()
    process.wait()


def test_a_stop_naming_nothing_or_the_recorded_engine_stops_the_recorded_one():
    recorded = record(4242, 1000)
    assert engine_to_stop(recorded, "d1", {}) is recorded
    assert engine_to_stop(recorded, "d1", {"ready": False, "stopped": True}) is recorded
    assert engine_to_stop(recorded, "d1", {"pid": 4242, "pid_start": 1000, "port": 8000}) is recorded


def test_a_stop_naming_another_engine_than_the_recorded_one_stops_nothing():
    with pytest.raises(runtime.StopRefused, match="nothing was stopped") as refused:
        engine_to_stop(record(4242, 1000), "d1", {"pid": 4242, "pid_start": 999})
    assert refused.value.hint
    with pytest.raises(runtime.StopRefused, match="nothing was stopped"):
        engine_to_stop(record(4242, 1000), "d1", {"pid": 5151, "pid_start": 1000})


def test_a_bare_pid_without_a_record_here_stops_nothing():
    with pytest.raises(runtime.StopRefused, match="without its start time"):
        engine_to_stop(None, "d1", {"pid": 4242})
    named = engine_to_stop(None, "d1", {"pid": 4242, "pid_start": 1000})
    assert (named.pid, named.pid_start) == (4242, 1000)


def test_the_recorded_engine_is_stopped_when_its_process_is_the_one_recorded(engine):
    runner = LocalRunner()
    pid_start = run_coroutine_sync(runner.process_start(engine.pid))
    assert pid_start
    outcome = run_coroutine_sync(runtime.stop_engine(runner, record(engine.pid, pid_start), grace_s=5))
    assert outcome == "stopped"
    assert engine.wait(10) is not None


def test_a_pid_now_held_by_another_process_is_never_signalled(engine):
    """The recorded engine ended and the kernel gave its pid to `engine`: same pid, another start time."""
    runner = LocalRunner()
    pid_start = run_coroutine_sync(runner.process_start(engine.pid))
    earlier_engine = record(engine.pid, pid_start - 1)
    assert run_coroutine_sync(runtime.engine_state(runner, earlier_engine)) == "other"
    assert run_coroutine_sync(runtime.stop_engine(runner, earlier_engine, grace_s=1)) == "not running"
    assert engine.poll() is None  # still running
