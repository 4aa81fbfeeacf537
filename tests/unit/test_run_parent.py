"""`kill -INT <make's pid>` stops `make run`: make does not pass the signal on, so the panel watches make
for the state its signal handler leaves it in. Real make, real signals; the recipe is a small Python child
that uses panel.run_parent as panel.run does."""

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from panel.run_parent import is_make, make_got_fatal_signal

REPO = Path(__file__).resolve().parents[2]
CHILD = """
import os, signal, sys, time
sys.path.insert(0, {repo!r})
from panel.run_parent import stop_with_make
signal.signal(signal.SIGINT, signal.default_int_handler)
watcher = stop_with_make(poll_s=0.05)
print("watching" if watcher else "no make", os.getpid(), flush=True)
try:
    time.sleep(60)
except KeyboardInterrupt:
    print("stopped", flush=True)
"""


def start_make(tmp_path: Path) -> subprocess.Popen:
    (tmp_path / "child.py").write_text(CHILD.format(repo=str(REPO)))
    (tmp_path / "Makefile").write_text(f"run:\n\t{sys.executable} child.py\n")
    return subprocess.Popen(
        ["make", "-s", "run"],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        text=True,
        # As from a terminal: make catches SIGINT (a shell's background job would have it ignored).
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )


def first_line(process: subprocess.Popen) -> tuple[str, int]:
    """What the child says first: whether it watches make, and its pid (to end it by id)."""
    said, pid = process.stdout.readline().split()
    return said, int(pid)


def end(make: subprocess.Popen, child_pid: int) -> None:
    make.kill()
    with contextlib.suppress(ProcessLookupError):
        os.kill(child_pid, signal.SIGKILL)


@pytest.mark.timeout(60)
def test_sigint_to_make_stops_its_child_and_make(tmp_path):
    make = start_make(tmp_path)
    said, child = first_line(make)
    try:
        assert said == "watching"
        assert is_make(make.pid)
        assert not make_got_fatal_signal(make.pid)
        make.send_signal(signal.SIGINT)
        assert make.wait(30) != 0  # make ends with the signal once its child is gone
        assert make.stdout.read().strip() == "stopped"
    finally:
        end(make, child)


def test_a_process_whose_parent_is_not_make_is_left_alone():
    child = subprocess.run(
        [sys.executable, "-c", CHILD.format(repo=str(REPO)).replace("time.sleep(60)", "pass")],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert child.stdout.startswith("no make ")


@pytest.mark.timeout(60)
def test_make_waiting_normally_is_not_taken_for_a_signal(tmp_path):
    make = start_make(tmp_path)
    said, child = first_line(make)
    try:
        assert said == "watching"
        for _ in range(5):
            assert not make_got_fatal_signal(make.pid)
            time.sleep(0.05)
    finally:
        end(make, child)
