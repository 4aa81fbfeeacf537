"""The leader's wake for a scale-up runs beside its tick (issue 36): with a real panel worker, the step that
finds a sleeper returns at once (the engine still asleep: its wake takes 2 s) and the worker wakes it, so
the tick's other deployments are not held for the wake."""

import time

import httpx
import pytest

from tests.integration.test_autoscale_wake_first import (
    SCALE,
    body,
    busy_for_the_window,
    decisions,
    put,
    tiny_here,  # noqa: F401 (fixture)
)
from tests.integration.test_sleep_wake import node  # noqa: F401 (fixture: npu-local, loopback, 2 NPUs)
from tests.sim_engine_process import start_engine, stop, wait_healthy

pytestmark = pytest.mark.django_db(transaction=True)

WAKE_S = 2.0


@pytest.fixture
def sleeper(celery_worker, tiny_here, bob):  # noqa: F811
    from panel.deployments import metrics_history, sleep_state, sleeping
    from panel.deployments.models import Deployment

    for name in ("elastic", "elastic-r2"):
        metrics_history.forget(name)
    put(bob, "elastic", body(replicas=2, autoscale=SCALE, idle={"sleep_after_s": 600, "level": 1}))
    second = Deployment.objects.get(name="elastic-r2")
    port = second.spec["port"]
    env = {"VLLM_SERVER_DEV_MODE": "1", "SIM_ENGINE_WAKE_S_LEVEL1": str(WAKE_S)}
    process = start_engine(port, "--enable-sleep-mode", env=env)
    url = f"http://127.0.0.1:{port}"
    wait_healthy(url, process)
    assert sleeping.sleep(second, level=1, reason=[{"text": "idle", "params": {}}]) is True
    yield second, url
    stop(process)
    for row in Deployment.objects.filter(name__startswith="elastic"):
        sleep_state.forget(row.pk)


def test_the_tick_returns_while_the_worker_wakes_the_sleeper(sleeper):
    from panel.deployments import sleep_state
    from panel.deployments.autoscale.decider import step_all

    second, url = sleeper
    now = busy_for_the_window()
    started = time.monotonic()
    assert step_all(now)["elastic"] == "waking"
    assert time.monotonic() - started < WAKE_S  # not held for the wake
    deadline = time.monotonic() + 30
    while sleep_state.asleep_level(second.pk) is not None and time.monotonic() < deadline:
        time.sleep(0.2)
    assert sleep_state.asleep_level(second.pk) is None, "the worker did not wake it"
    assert httpx.get(f"{url}/is_sleeping").json() == {"is_sleeping": False}
    (woke,) = decisions("wake")
    assert (woke.actor, woke.outcome, woke.replica) == ("leader", "done", "elastic-r2")
    assert woke.figures["wake_s"] >= WAKE_S
    deadline = time.monotonic() + 10
    while sleep_state.waking(second.pk) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not sleep_state.waking(second.pk)  # the lock is released once the wake ended
