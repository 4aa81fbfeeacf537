"""The agent's own guarantees, on real files and real processes: an operation runs in one attempt at a time
(an flock the kernel drops when the agent is killed), a finished one never runs again, and what the broker
did not take waits on disk and leaves in order."""

import os
import signal
import subprocess
import sys
import time
import uuid

import pytest

from workers import leases
from workers.leases import LeaseUnavailable, OperationLease, finished_operations, running_operations
from workers.spool import Spool


@pytest.fixture(autouse=True)
def state_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("ASCEND_PANEL_STATE_DIR", str(tmp_path / "state"))
    return tmp_path / "state"


def test_a_second_delivery_does_not_run_while_the_first_attempt_holds_the_lease():
    operation = str(uuid.uuid4())
    first = OperationLease(operation)
    assert first.acquire() == 1
    assert running_operations() == [operation]
    with pytest.raises(LeaseUnavailable, match="running in another attempt"):
        OperationLease(operation).acquire()
    first.release()
    assert running_operations() == []


def test_an_attempt_that_ended_early_is_followed_by_a_numbered_new_one_and_a_finished_operation_never_runs():
    operation = str(uuid.uuid4())
    crashed = OperationLease(operation)
    crashed.acquire()
    crashed.release()  # no finish(): the attempt died
    second = OperationLease(operation)
    assert second.acquire() == 2
    second.finish("succeeded")
    second.release()
    with pytest.raises(LeaseUnavailable, match="already ended succeeded"):
        OperationLease(operation).acquire()
    assert operation in finished_operations()


def test_the_lease_of_an_agent_killed_by_sigkill_is_free_again(state_dir):
    operation = str(uuid.uuid4())
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from workers.leases import OperationLease\n"
            "OperationLease(sys.argv[1]).acquire(); print('held', flush=True); time.sleep(60)",
            operation,
        ],
        env={**os.environ, "ASCEND_PANEL_STATE_DIR": str(state_dir)},
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout.readline().strip() == "held"
    with pytest.raises(LeaseUnavailable):
        OperationLease(operation).acquire()
    os.kill(holder.pid, signal.SIGKILL)
    holder.wait(10)
    lease = OperationLease(operation)
    assert lease.acquire() == 2  # the killed agent's attempt was the first
    lease.release()


def test_only_operation_ids_name_lease_files():
    with pytest.raises(ValueError, match="badly formed"):
        OperationLease("../../etc/passwd")


def test_finished_records_are_reported_for_an_hour_and_pruned_after_a_week(state_dir):
    operation = str(uuid.uuid4())
    lease = OperationLease(operation)
    lease.acquire()
    lease.finish("failed")
    lease.release()
    now = time.time()
    assert finished_operations(now + leases.DONE_REPORTED_S - 1) == [operation]
    assert finished_operations(now + leases.DONE_REPORTED_S + 1) == []
    finished_operations(now + leases.RECORDS_KEPT_S + 1)
    assert not lease.record_path.exists()


class FlakyBroker:
    def __init__(self):
        self.up = False
        self.sent = []

    def send(self, task, message):
        if not self.up:
            raise ConnectionError("Error 111 connecting to broker")
        self.sent.append(message["n"])


def test_what_the_broker_refuses_waits_on_disk_and_everything_after_it_keeps_its_order(state_dir):
    state_dir.mkdir(parents=True)
    broker = FlakyBroker()
    spool = Spool(state_dir, broker.send)
    spool.send("t", {"n": 1})
    broker.up = True
    spool.send("t", {"n": 2})  # the broker is back, but 1 waits: 2 queues behind it
    # The sender thread, woken by that send, may already have delivered both: 2 sent past the spool
    # would have arrived first.
    assert spool.drain() is True
    assert broker.sent == [1, 2]
    assert not spool.path.exists()
    spool.send("t", {"n": 3})
    assert broker.sent == [1, 2, 3]


def test_a_restarted_agent_sends_what_its_killed_predecessor_spooled(state_dir):
    state_dir.mkdir(parents=True)
    down = FlakyBroker()
    Spool(state_dir, down.send).send("t", {"n": 1})
    up = FlakyBroker()
    up.up = True
    Spool(state_dir, up.send)  # starts its sender at once
    for _ in range(100):
        if up.sent:
            break
        time.sleep(0.05)
    assert up.sent == [1]


def test_a_full_spool_drops_new_messages_and_keeps_the_old(state_dir):
    state_dir.mkdir(parents=True)
    broker = FlakyBroker()
    spool = Spool(state_dir, broker.send, max_bytes=120)
    spool.send("t", {"n": 1, "pad": "x" * 40})
    spool.send("t", {"n": 2, "pad": "x" * 40})
    assert spool.dropped == 1
    broker.up = True
    spool.drain()
    assert broker.sent == [1]


def test_a_state_change_leaves_at_once_so_a_killed_attempt_is_known_to_have_started():
    from workers.events import EventEmitter

    sent = []
    emitter = EventEmitter("op", "n", flush_interval=3600, send=lambda _task, batch, **_: sent.append(batch))
    emitter.log("buffered")
    assert sent == []
    emitter.emit("state", state="running")
    assert [[e["kind"] for e in batch["events"]] for batch in sent] == [["log", "state"]]
    emitter.log("buffered again")
    emitter.progress(50, "half way")  # what a progress bar shows leaves at once too
    assert [e["kind"] for e in sent[-1]["events"]] == ["log", "progress"]


def test_buffered_events_leave_on_their_own_within_the_flush_interval():
    import threading

    from workers.events import EventEmitter

    sent, arrived = [], threading.Event()

    def send(_task, batch, **_):
        sent.append(batch)
        arrived.set()

    emitter = EventEmitter("op", "n", flush_interval=0.3, send=send)
    emitter.emit("state", state="running")
    emitter.log("first")  # within the interval of the state's batch: it waits for the timer
    emitter.log("second")
    assert len(sent) == 1
    arrived.clear()

    assert arrived.wait(5), "the buffered lines never left without a further event"
    assert [[e["payload"].get("line") for e in batch["events"]] for batch in sent[1:]] == [
        ["first", "second"]
    ]


def test_without_the_timer_buffered_events_wait_for_the_next_event_or_the_end():
    import time

    from workers.events import EventEmitter

    sent = []
    emitter = EventEmitter(
        "op", "n", flush_interval=0.1, flush_timer=False, send=lambda _t, b, **_: sent.append(b)
    )
    emitter.emit("state", state="running")
    emitter.log("waits")
    time.sleep(0.3)
    assert len(sent) == 1
    emitter.finish("succeeded")
    assert [[e["kind"] for e in batch["events"]] for batch in sent[1:]] == [["log", "state"], []]
    assert sent[-1]["final_seq"] == 3
