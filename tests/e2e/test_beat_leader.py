"""Two real beat processes on one Redis: one ticks; when it is killed with SIGKILL the other takes over within
the lock's TTL and carries on the schedule it recorded; a clean stop hands over at once."""

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import redis

from panel.run import _die_with_parent

REPO = Path(__file__).resolve().parent.parent.parent
TTL_S = 3


def _url_with_db(url: str, db: int) -> str:
    return url.rsplit("/", 1)[0] + f"/{db}"


@pytest.fixture
def beat_redis(redis_url, test_prefix):
    """A Redis database of its own for the beats' broker messages (the sweeps they send have no worker here),
    and the leader keys under this session's prefix."""
    broker_url = _url_with_db(redis_url, 9)
    client = redis.Redis.from_url(redis_url)
    key = f"{test_prefix}:beat"
    yield broker_url, client, key
    client.delete(f"{key}:leader", f"{key}:last-run")
    redis.Redis.from_url(broker_url).flushdb()


def _start_beat(tmp_path, name, redis_url, broker_url, key):
    env = {
        **os.environ,
        "PANEL_MODE": "test",
        "REDIS_URL": redis_url,
        "CELERY_BROKER_URL": broker_url,
        "PANEL_BEAT_KEY": key,
        "PANEL_BEAT_LEADER_TTL_S": str(TTL_S),
        "PANEL_REAP_S": "1",
        "DATABASE_URL": f"sqlite:///{tmp_path / 'unused.sqlite3'}",
    }
    env.pop("PYTEST_CURRENT_TEST", None)
    log = (tmp_path / f"{name}.log").open("ab")
    return subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "panel.celery", "beat", "--loglevel", "INFO"],
        cwd=REPO,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        preexec_fn=_die_with_parent,
    )


def _wait_for(predicate, timeout_s, what):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = predicate()
        if found:
            return found
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def _leader_pid(client, key):
    holder = client.get(f"{key}:leader")
    return int(holder.decode().split(":")[1]) if holder else None


def _reap_ran_at(client, key):
    value = client.hget(f"{key}:last-run", "reap-operations")
    return value.decode() if value else None


def test_one_beat_ticks_and_a_standby_takes_over_a_killed_leader(tmp_path, redis_url, beat_redis):
    broker_url, client, key = beat_redis
    beats = {}
    try:
        for name in ("beat-a", "beat-b"):
            process = _start_beat(tmp_path, name, redis_url, broker_url, key)
            beats[process.pid] = process
        leader = _wait_for(lambda: _leader_pid(client, key), 60, "a beat to take the lead")
        assert leader in beats
        first_run = _wait_for(lambda: _reap_ran_at(client, key), 30, "the leader to send the reaper")
        # The standby does not tick: the leader key stays with the first holder while both run.
        _wait_for(lambda: _reap_ran_at(client, key) != first_run, 30, "the reaper to run again")
        assert _leader_pid(client, key) == leader

        beats[leader].kill()
        beats[leader].wait(10)
        standby = next(pid for pid in beats if pid != leader)
        _wait_for(lambda: _leader_pid(client, key) == standby, TTL_S + 30, "the standby to take the lead")
        taken_over_at = _reap_ran_at(client, key)
        _wait_for(lambda: _reap_ran_at(client, key) != taken_over_at, 30, "the new leader to send the reaper")
    finally:
        for process in beats.values():
            if process.poll() is None:
                process.terminate()
                process.wait(20)


def test_a_beat_that_stops_cleanly_hands_over_at_once(tmp_path, redis_url, beat_redis):
    broker_url, client, key = beat_redis
    first = _start_beat(tmp_path, "first", redis_url, broker_url, key)
    second = None
    try:
        _wait_for(lambda: _leader_pid(client, key) == first.pid, 60, "the first beat to lead")
        second = _start_beat(tmp_path, "second", redis_url, broker_url, key)
        first.terminate()
        first.wait(20)
        # The key is released on a clean stop, so the second takes it without waiting out a TTL: with a TTL
        # much longer than the wait below, only the release lets this pass.
        if _leader_pid(client, key) == first.pid:
            client.pexpire(f"{key}:leader", 600_000)
        _wait_for(lambda: _leader_pid(client, key) == second.pid, 60, "the second beat to lead")
    finally:
        for process in (first, second):
            if process is not None and process.poll() is None:
                process.terminate()
                process.wait(20)
