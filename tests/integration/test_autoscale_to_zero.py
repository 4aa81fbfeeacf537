"""`autoscale.min: 0` with `idle:` (issue 36 item 2; panel/deployments/autoscale/config.py): zero is one
engine asleep, not none. The autoscaler's step from one replica to zero puts the sim engine to sleep (a
`sleep` decision with its reason and figures), leaves an asleep engine out of its figures, and holds while
the gateway routed a request within the down window; the first request wakes it through the gateway's hold.
Without `idle:` a `min: 0` is refused with the reason."""

import asyncio
from datetime import timedelta

import httpx
import pytest
from django.utils import timezone

from tests.conftest import api_client_for
from tests.integration.test_sleep_wake import node, start_sleepy
from tests.sim_engine_process import stop

pytestmark = pytest.mark.django_db

__all__ = ["node"]  # a fixture used by name

TO_ZERO = {"min": 0, "max": 2, "target": {"waiting_per_replica": 2}, "up_after_s": 10, "down_after_s": 20}
QUIET = {"waiting": 0, "running": 0}


@pytest.fixture
def to_zero(_wired_to_redis, tmp_path, node, bob):
    from panel.deployments import metrics_history, sleep_state

    metrics_history.forget("zero")
    deployment, url, process = start_sleepy(tmp_path, node, bob, "zero", autoscale=TO_ZERO)
    yield deployment, url
    stop(process)
    metrics_history.forget("zero")
    sleep_state.forget(deployment.pk)  # the next test's row may get the same id
    sleep_state.client().delete(sleep_state.last_key(deployment.pk))


def probes(start, seconds: int, figures: dict):
    """What the probes would have stored every 2 s from `start` for `seconds`; the time after them."""
    from panel.deployments import metrics_history

    for offset in range(0, seconds + 1, 2):
        metrics_history.record("zero", figures, start + timedelta(seconds=offset))
    return start + timedelta(seconds=seconds)


def step(now):
    from panel.deployments.autoscale.decider import step_all

    return step_all(now)["zero"]


def test_min_zero_without_idle_is_refused_with_the_reason(bob, node):
    body = {
        "model": "tiny-qwen", "path": "/models/tiny-qwen", "placement": {"node": "npu-local", "npus": 1},
        "autoscale": TO_ZERO,
    }  # fmt: skip
    answer = api_client_for(bob).put("/api/v1/deployments/zero/", body, format="json")
    assert answer.status_code == 400, answer.json()
    (message,) = answer.json()["errors"]["autoscale"]
    assert message.startswith("min 0 needs idle: at zero the last engine sleeps")


def test_the_quiet_last_replica_sleeps_and_the_first_request_wakes_it(to_zero):
    from panel.deployments import sleep_state
    from panel.deployments.decision_models import Decision
    from panel.gateway import store
    from panel.gateway.instances import wake
    from panel.gateway.instances.pool import _instances_of

    deployment, url = to_zero
    assert deployment.replicas_wanted == 1  # min 0 starts one engine, awake
    now = probes(timezone.now() + timedelta(seconds=30), 12, QUIET)  # past the creating apply's cooldown
    assert step(now) == "hold"  # 12 s of a 20 s window
    now = probes(now, 10, QUIET)
    assert step(now) == "asleep"
    assert httpx.get(f"{url}/is_sleeping").json() == {"is_sleeping": True}
    (slept,) = Decision.objects.filter(deployment_name="zero", kind="sleep")
    assert (slept.outcome, slept.actor) == ("done", "leader")
    assert slept.reason == "no request running or waiting for 20 s: 1 → 0, asleep (min 0)"
    assert (slept.figures["from"], slept.figures["to"], slept.figures["level"]) == (1, 0, 1)
    # Asleep, the engine is no figure: nothing to decide on, and never a second sleep.
    now = probes(now, 22, QUIET)
    assert step(now) == "hold"
    assert Decision.objects.filter(deployment_name="zero", kind__in=["sleep", "scale_down"]).count() == 1

    instances = _instances_of(deployment)

    async def first_request():
        return await wake.hold(store.aclient(), instances, "qwen")

    routed, refused = asyncio.run(first_request())
    assert refused is None
    assert [i.deployment_id for i in routed] == [deployment.pk]
    assert httpx.get(f"{url}/is_sleeping").json() == {"is_sleeping": False}
    assert sleep_state.asleep_level(deployment.pk) is None

    # Awake with quiet figures again, but the gateway routed a request 5 s ago: a request can start and end
    # between two probes, so the last engine stays awake for a whole down window after it.
    now = timezone.now() + timedelta(seconds=60)
    probes(now - timedelta(seconds=24), 24, QUIET)
    sleep_state.touch(deployment.pk, now.timestamp() - 5)
    assert step(now) == "hold"
    sleep_state.touch(deployment.pk, now.timestamp() - 21)
    assert step(now) == "asleep"
    assert Decision.objects.filter(deployment_name="zero", kind="sleep").count() == 2
