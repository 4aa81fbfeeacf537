"""make run's supervisor with real child processes: a child killed with SIGKILL is started again, as systemd
restarts an agent on a host; one that keeps dying is given up on, so make run stops instead of spinning."""

import os
import signal
import sys
import time

from panel import run
from panel.run import Supervisor


def wait_exited(supervisor: Supervisor, timeout: float = 10) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        exited = supervisor.watch()
        if exited is not None:
            return exited
        time.sleep(0.05)
    raise AssertionError("no child exited")


def test_a_killed_child_is_started_again_with_the_same_command():
    supervisor = Supervisor(dict(os.environ))
    try:
        first = supervisor.start(
            "agent sim-a2", [sys.executable, "-c", "import time; time.sleep(60)"], quiet=True
        )
        os.kill(first.pid, signal.SIGKILL)
        assert wait_exited(supervisor) == "agent sim-a2"
        assert supervisor.restart("agent sim-a2") is True
        ((name, second),) = supervisor.children
        assert name == "agent sim-a2"
        assert second.pid != first.pid
        assert second.poll() is None
    finally:
        supervisor.stop()


def test_a_child_that_keeps_exiting_is_given_up_on(monkeypatch):
    monkeypatch.setattr(run, "RESTART_LIMIT", 3)
    supervisor = Supervisor(dict(os.environ))
    try:
        supervisor.start("worker", [sys.executable, "-c", "raise SystemExit(3)"], quiet=True)
        verdicts = []
        for _ in range(4):
            wait_exited(supervisor)
            verdicts.append(supervisor.restart("worker"))
        assert verdicts == [True, True, True, False]
    finally:
        supervisor.stop()
