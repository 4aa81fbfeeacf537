"""bench/pd.py measures the PD proxy's overhead with the engines on CPUs of their own, apart from the web
server, Redis and the bench's client, as engines run on their own hosts: every thread of each process moves,
and all of them get every CPU back when the measure ends."""

import os
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from bench.pd import cpu_split, engines_apart

# A process with a second thread already running when it is pinned (a sim engine has one per connection).
THREADED = (
    "import threading, time; threading.Thread(target=time.sleep, args=(60,), daemon=True).start(); "
    "time.sleep(60)"
)


def threads_of(pid: int) -> list[int]:
    return [int(task.name) for task in Path(f"/proc/{pid}/task").iterdir()]


def affinities(pid: int) -> list[set[int]]:
    return [os.sched_getaffinity(tid) for tid in threads_of(pid)]


def started() -> subprocess.Popen:
    process = subprocess.Popen([sys.executable, "-c", THREADED])
    deadline = time.monotonic() + 10
    while len(threads_of(process.pid)) < 2:
        assert time.monotonic() < deadline, "the test process did not start its second thread"
        time.sleep(0.02)
    return process


def test_the_cpus_split_in_two_halves_and_one_cpu_is_not_split(monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda _pid: {0, 1, 2, 3})
    assert cpu_split() == ({0, 1}, {2, 3})
    monkeypatch.setattr(os, "sched_getaffinity", lambda _pid: {5, 7})
    assert cpu_split() == ({5}, {7})
    monkeypatch.setattr(os, "sched_getaffinity", lambda _pid: {3})
    assert cpu_split() is None


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs to split")
def test_engines_and_the_panel_side_run_apart_in_every_thread_until_the_measure_ends():
    everything = os.sched_getaffinity(0)
    split = cpu_split()
    assert split is not None
    engines, panel = split
    engine, web = started(), started()
    stack = SimpleNamespace(engines=[engine], supervisor=SimpleNamespace(children=[("web", web)]))
    try:
        with engines_apart(stack, split):
            assert affinities(engine.pid) == [engines, engines]
            assert affinities(web.pid) == [panel, panel]
            assert os.sched_getaffinity(0) == panel  # the bench's own client
        assert affinities(engine.pid) == [everything, everything]
        assert affinities(web.pid) == [everything, everything]
        assert os.sched_getaffinity(0) == everything
    finally:
        for process in (engine, web):
            process.kill()
            process.wait()


def test_nothing_moves_without_a_split():
    before = os.sched_getaffinity(0)
    with engines_apart(SimpleNamespace(engines=[], supervisor=SimpleNamespace(children=[])), None):
        assert os.sched_getaffinity(0) == before
