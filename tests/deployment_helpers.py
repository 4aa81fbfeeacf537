"""Shared by the deployment integration and engine tests: the reconcile beat in a thread, waiting, cleanup."""

import contextlib
import os
import signal
import threading
import time

import pytest


@pytest.fixture
def reconcile_loop(transactional_db):
    """The beat's job (panel.reconcile_deployments), every second, for the length of the test. It needs the
    database fixture so that it stops before the database is flushed: a tick's row locks and the flush's
    TRUNCATE deadlocked on PostgreSQL."""
    from django.db import close_old_connections

    from panel.deployments.rollouts.reconcile import tick

    stop = threading.Event()
    errors = []

    def loop():
        # A failed pass does not end the loop, as a failed beat task does not end beat; the test fails at
        # teardown with the error instead of timing out on whatever the dead loop would have done.
        while not stop.is_set():
            try:
                tick()
            except Exception as error:  # reported at teardown
                errors.append(repr(error))
            finally:
                close_old_connections()
            stop.wait(1.0)

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    yield
    stop.set()
    thread.join(10)
    assert not errors, f"reconcile passes failed: {errors[:3]}"


def wait_for(predicate, timeout, what, every=0.2):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def kill_recorded_engines(host_root) -> None:
    """Whatever a failing test left running must not answer the next test's port."""
    from workers.engine.running import runtime

    for record_file in runtime.state_dir(str(host_root)).glob("*.json"):
        record = runtime.load_record(str(host_root), record_file.stem)
        if record is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(record.pid, signal.SIGKILL)


def deployment_json(client, pk):
    return client.get(f"/api/v1/deployments/{pk}/").json()


def free_port_pair() -> int:
    """A free port whose next port is free too (a deployment uses port and port + 1), below the kernel's
    ephemeral range: the panel plans engines from it upwards for a whole session, and a port in that range
    may meanwhile be handed to any process's socket (an engine then failed to bind under a full test run)."""
    import random
    import socket
    from pathlib import Path

    try:
        ephemeral_low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        ephemeral_low = 32768
    chooser = random.SystemRandom()
    for _attempt in range(200):
        port = chooser.randrange(10000, max(ephemeral_low - 200, 10002), 2)
        try:
            with socket.socket() as first, socket.socket() as second:
                first.bind(("127.0.0.1", port))
                second.bind(("127.0.0.1", port + 1))
        except OSError:
            continue
        return port
    raise RuntimeError("no two neighbouring free ports on loopback below the ephemeral range")


def deployment_body(qwen, name="qwen-chat", **changes):
    """A create body for the `qwen` fixture's model and copy on one NPU of sim-a2, with `changes` on top."""
    model, artifact = qwen
    return {
        "name": name,
        "model": model.pk,
        "artifact": artifact.pk,
        "nodes": [{"node": "sim-a2", "npus": [0]}],
        "max_model_len": 4096,
        **changes,
    }
