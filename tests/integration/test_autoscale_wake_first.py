"""Elastic serving's two wake rules (issue 36) on the database and Redis: a scale-up that finds an engine of
the deployment asleep wakes it (a real sim engine able to sleep) instead of placing a cold replica, and says
so with its figures; a level-2 sleeper whose HBM a sharing deployment took is not woken: the refusal is
recorded once, the engine is left asleep (no restart), and the gateway's hold answers the request an
OpenAI-shaped 503 naming the NPU and who holds it."""

import asyncio
import json
import time
from datetime import timedelta

import httpx
import pytest
from django.utils import timezone

from tests.conftest import api_client_for
from tests.integration.test_deployment_apply import finish, pending
from tests.integration.test_sleep_wake import node  # noqa: F401 (fixture: npu-local, loopback, 2 NPUs)
from tests.sim_engine_process import start_engine, stop, wait_healthy

pytestmark = pytest.mark.django_db

SCALE = {"min": 1, "max": 2, "target": {"waiting_per_replica": 2}, "up_after_s": 10, "down_after_s": 20}
RUNTIME = {"runtime": {"pid": 1, "port": 0, "log_path": "/x.log"}}


@pytest.fixture
def tiny_here(tmp_path, node):  # noqa: F811
    from panel.catalog.models import Model, ModelArtifact
    from workers.models.inspect import inspect_model
    from workers.models.tiny import main as make_tiny

    assert make_tiny([str(tmp_path / "tiny"), "--arch", "qwen2"]) == 0
    model = Model.objects.create(
        name="tiny-qwen", repo_id="Acme/Tiny", facts=inspect_model(tmp_path / "tiny")
    )
    ModelArtifact.objects.create(model=model, node=node, path="/models/tiny-qwen", ready=True)
    return node


def body(**extra):
    return {
        "model": "tiny-qwen", "path": "/models/tiny-qwen", "placement": {"node": "npu-local", "npus": 1},
        "engine": {"max_model_len": 2048, "served_model_name": "qwen"}, **extra,
    }  # fmt: skip


def put(bob, name, spec):
    answer = api_client_for(bob).put(f"/api/v1/deployments/{name}/", spec, format="json")
    assert answer.status_code == 201, answer.json()
    for launch in pending("deploy"):
        launch.finished = launch.created + timedelta(seconds=42)  # as the ingest stamps the last event
        finish(launch, result=RUNTIME)


def decisions(kind):
    from panel.deployments.decision_models import Decision

    return list(Decision.objects.filter(kind=kind).order_by("time", "pk"))


@pytest.fixture
def two_rows(_wired_to_redis, tiny_here, bob):
    """`elastic`: two rows (min 1, max 2, idle: level 1), both running; elastic-r2's engine is a sim engine
    able to sleep, on its planned port, put to sleep as the idle step would: (elastic-r2, its URL, its
    process)."""
    from panel.deployments import metrics_history, sleep_state, sleeping
    from panel.deployments.models import Deployment

    for name in ("elastic", "elastic-r2"):
        metrics_history.forget(name)
    put(bob, "elastic", body(replicas=2, autoscale=SCALE, idle={"sleep_after_s": 600, "level": 1}))
    second = Deployment.objects.get(name="elastic-r2")
    assert second.observed_state == "running"
    port = second.spec["port"]
    process = start_engine(
        port, "--enable-sleep-mode", env={"VLLM_SERVER_DEV_MODE": "1", "SIM_ENGINE_WAKE_S_LEVEL1": "0.3"}
    )
    url = f"http://127.0.0.1:{port}"
    wait_healthy(url, process)
    assert sleeping.sleep(second, level=1, reason=[{"text": "idle", "params": {}}]) is True
    yield second, url, process
    stop(process)
    for row in Deployment.objects.filter(name__startswith="elastic"):
        sleep_state.forget(row.pk)


@pytest.fixture
def queued(monkeypatch):
    """The wake tasks the leader's step queued (their arguments), not run: no worker here."""
    from panel.deployments.autoscale import waking

    sent = []
    monkeypatch.setattr(waking.wake_for_scale, "delay", lambda *args: sent.append(args))
    return sent


def busy_for_the_window(name="elastic"):
    """The awake row busy for the whole 10 s up window; the time to step at."""
    from panel.deployments import metrics_history

    start = timezone.now() + timedelta(seconds=30)  # past the cooldown of the apply that created it
    for offset in range(0, 13, 2):
        metrics_history.record(name, {"waiting": 6, "running": 8}, start + timedelta(seconds=offset))
    return start + timedelta(seconds=12)


def test_a_scale_up_wakes_the_sleeping_replica_instead_of_a_cold_start(two_rows, queued):
    from panel.deployments import sleep_state
    from panel.deployments.autoscale.decider import step_all
    from panel.deployments.autoscale.waking import wake_for_scale
    from panel.deployments.models import Deployment

    second, url, _process = two_rows
    now = busy_for_the_window()
    assert step_all(now)["elastic"] == "waking"
    (task,) = queued  # the wake runs beside the tick: the engine still sleeps when the step returns
    assert httpx.get(f"{url}/is_sleeping").json() == {"is_sleeping": True}
    assert sleep_state.waking(second.pk)  # the gateway's requests wait for this wake, not a second one
    assert step_all(now + timedelta(seconds=2))["elastic"] == "deferred"  # its next step waits for it
    assert wake_for_scale(*task) == "woke"  # as the worker runs it
    assert not sleep_state.waking(second.pk)

    assert httpx.get(f"{url}/is_sleeping").json() == {"is_sleeping": False}
    assert sleep_state.asleep_level(second.pk) is None
    assert sleep_state.last_request(second.pk) >= time.time() - 30  # the idle step does not put it back
    assert pending("deploy") == []  # no cold replica was placed
    assert Deployment.objects.get(name="elastic").replicas_wanted == 2
    assert decisions("scale_up") == []
    (woke,) = decisions("wake")
    assert (woke.actor, woke.outcome, woke.replica) == ("leader", "done", "elastic-r2")
    assert woke.reason == (
        "waiting 6.0/replica > 2.0 for 10 s: 1 → 2 — waking elastic-r2 instead of a cold start"
    )
    figures = woke.figures
    assert (figures["from"], figures["to"], figures["waiting_per_replica"], figures["level"]) == (
        1,
        2,
        6.0,
        1,
    )
    assert 0.3 <= figures["wake_s"] < 10
    assert figures["cold_start_s"] == 42.0  # the deployment's last launch, for comparison


def test_a_wake_for_a_scale_up_that_fails_is_recorded_answered_and_the_engine_restarted(two_rows, queued):
    from panel.deployments import sleep_state
    from panel.deployments.autoscale.decider import step_all
    from panel.deployments.autoscale.waking import wake_for_scale
    from panel.operations.models import Operation

    second, _url, process = two_rows
    assert step_all(busy_for_the_window())["elastic"] == "waking"
    (task,) = queued
    row_id = task[0]
    process.kill()  # the engine died while asleep: /wake_up finds no one
    process.wait(10)
    assert wake_for_scale(*task) == "failed"
    (failed,) = decisions("wake_failed")
    assert (failed.actor, failed.replica) == ("leader", "elastic-r2")
    assert "did not answer" in failed.reason
    assert "elastic-r2 did not wake" in sleep_state.client().get(sleep_state.wake_failed_key(row_id))
    assert not sleep_state.waking(row_id)
    assert sleep_state.asleep_level(row_id) is None  # restarted: it comes up awake
    assert Operation.objects.filter(kind="stop", target="elastic-r2").exists()


@pytest.fixture
def crowded(_wired_to_redis, tiny_here, bob):
    """`napper` shares NPU 0 at 0.5 and sleeps at level 2 (its HBM back to the ledger); `taker`, sharing
    too, then takes 0.6 of the same NPU, which fits only because napper's share is not counted."""
    from panel.deployments import sleep_state
    from panel.deployments.models import Deployment

    def shared(utilization, **extra):
        spec = body(**extra)
        spec["placement"] = {"node": "npu-local", "npus": [0], "share": True}
        spec["engine"] = {**spec["engine"], "gpu_memory_utilization": utilization}
        return spec

    put(bob, "napper", shared(0.5, idle={"sleep_after_s": 600, "level": 2}))
    napper = Deployment.objects.get(name="napper")
    sleep_state.mark_asleep(napper.pk, 2)
    taker = shared(0.6)
    taker["engine"]["served_model_name"] = "other"
    put(bob, "taker", taker)
    yield napper
    sleep_state.forget(napper.pk)


@pytest.mark.django_db(transaction=True)  # the gateway asks from a thread of its own: committed rows
def test_a_level_2_sleeper_without_room_is_refused_once_and_the_gateway_names_why(crowded):
    from panel.deployments import sleep_state, sleeping
    from panel.deployments.conflicts import DeploymentConflict
    from panel.gateway import store
    from panel.gateway.instances import wake
    from panel.gateway.instances.pool import _instances_of
    from panel.operations.models import Operation

    napper = crowded
    why = (
        "NPU 0 on npu-local has 24.4 GiB free of 64.0 GiB; napper needs 30.5 GiB to wake "
        "(gpu_memory_utilization 0.5): taker took its HBM while it slept at level 2."
    )
    with pytest.raises(DeploymentConflict) as refused:
        sleeping.wake(napper, reason=[{"text": "by hand", "params": {}}])
    assert str(refused.value) == f"napper did not wake: {why}"

    instances = _instances_of(napper)

    async def first_requests():
        redis = store.aclient()
        return await asyncio.gather(*(wake.hold(redis, instances, "qwen") for _ in range(3)))

    for routed, answer in asyncio.run(first_requests()):
        assert routed == []
        assert answer.status == 503
        error = json.loads(answer.body)["error"]
        assert (error["code"], error["type"]) == ("wake_failed", "server_error")
        assert error["message"] == f"`qwen` is asleep and has no room to wake: {why}"
        assert "retry-after" not in {key.lower() for key in answer.headers}

    (failed,) = decisions("wake_failed")  # one record for a person's wake and three requests
    assert (failed.outcome, failed.actor, failed.reason) == ("failed", "user", why)
    assert sleep_state.asleep_level(napper.pk) == 2  # left asleep
    assert not Operation.objects.filter(kind="stop", target="napper").exists()  # not restarted
    assert decisions("wake") == []
