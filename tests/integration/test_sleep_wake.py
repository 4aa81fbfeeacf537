"""Sleep and wake against a real sim engine (issue 36 item 2, docs/serving-plane.md §3-§4): an idle:
deployment's engine (the sim engine with --enable-sleep-mode and dev mode, on the port the panel planned)
is put to sleep by the leader's idle step once it served nothing for sleep_after_s; the gateway's wake
hold then wakes it once for many concurrent first requests, which are served after; a wake that fails
answers an OpenAI-shaped error to every waiting request and the engine is restarted; by hand, an operator
sleeps and wakes it through the API (a viewer may not)."""

import asyncio
import json
import time
from datetime import timedelta

import httpx
import pytest
from django.db import transaction
from django.utils import timezone

from tests.conftest import api_client_for
from tests.sim_engine_process import start_engine, stop, wait_healthy

pytestmark = pytest.mark.django_db


@pytest.fixture
def node():
    from panel.nodes.models import Node, Npu

    node = Node.objects.create(
        name="npu-local", transport="agent", status="online", address="127.0.0.1",
        versions={"vllm-ascend": "0.11.0", "vllm": "0.11.0"},
    )  # fmt: skip
    for logic_id in range(2):
        Npu.objects.create(
            node=node, npu_id=logic_id, logic_id=logic_id, name="910B3", hbm_total_mb=65536, numa_node=0
        )
    return node


@pytest.fixture
def sleepy(_wired_to_redis, tmp_path, node, bob):
    """A running idle: deployment whose engine is a sim engine on the planned port."""
    deployment, url, process = start_sleepy(tmp_path, node, bob, "sleepy")
    yield deployment, url, process
    stop(process)


def start_sleepy(tmp_path, node, bob, name, **extra):
    """PUT an idle: deployment (`extra` spec keys beside), finish its launch as the ingest does and start
    a sim engine able to sleep on its planned port: (the deployment, the engine's root URL, its process)."""
    from panel.catalog.models import Model, ModelArtifact
    from panel.deployments.models import Deployment
    from panel.deployments.rollouts.reconcile import on_operation_terminal
    from panel.operations.models import Operation
    from workers.models.inspect import inspect_model
    from workers.models.tiny import main as make_tiny

    assert make_tiny([str(tmp_path / "tiny"), "--arch", "qwen2"]) == 0
    model = Model.objects.create(
        name="tiny-qwen", repo_id="Acme/Tiny", facts=inspect_model(tmp_path / "tiny")
    )
    ModelArtifact.objects.create(model=model, node=node, path="/models/tiny-qwen", ready=True)
    body = {
        "model": "tiny-qwen", "path": "/models/tiny-qwen", "placement": {"node": "npu-local", "npus": 1},
        "engine": {"max_model_len": 2048, "served_model_name": "qwen"},
        "idle": {"sleep_after_s": 60, "level": 1}, **extra,
    }  # fmt: skip
    created = api_client_for(bob).put(f"/api/v1/deployments/{name}/", body, format="json")
    assert created.status_code == 201, created.json()
    (launch,) = Operation.objects.filter(kind="deploy", status="pending")
    launch.status, launch.result = "succeeded", {"runtime": {"pid": 1, "port": 0, "log_path": "/x.log"}}
    launch.save()
    with transaction.atomic():  # as the operation's end arrives; a live-server test has no outer one
        on_operation_terminal(launch)
    deployment = Deployment.objects.get(name=name)
    assert deployment.observed_state == "running"
    port = deployment.spec["port"]
    process = start_engine(
        port, "--enable-sleep-mode",
        env={"VLLM_SERVER_DEV_MODE": "1", "SIM_ENGINE_WAKE_S_LEVEL1": "0.8"},
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    wait_healthy(url, process)
    return deployment, url, process


def _decisions(kind):
    from panel.deployments.decision_models import Decision

    return list(Decision.objects.filter(kind=kind).order_by("time"))


def _instances(deployment):
    from panel.gateway.instances.pool import _instances_of

    return _instances_of(deployment)


def test_the_leader_sleeps_an_idle_engine_and_one_wake_serves_concurrent_requests(sleepy, monkeypatch):
    from panel.deployments import sleep_state, sleeping
    from panel.gateway import store
    from panel.gateway.instances import wake

    deployment, url, _process = sleepy
    now = timezone.now()
    assert sleeping.idle_step(now) == 0  # first seen: its clock starts now
    assert sleeping.idle_step(now + timedelta(seconds=59)) == 0
    assert sleeping.idle_step(now + timedelta(seconds=61)) == 1
    assert httpx.get(f"{url}/is_sleeping").json() == {"is_sleeping": True}
    assert sleep_state.asleep_level(deployment.pk) == 1
    (slept,) = _decisions("sleep")
    assert (slept.outcome, slept.actor, slept.figures["level"]) == ("done", "leader", 1)
    assert slept.figures["idle_s"] >= 60
    assert sleeping.state_of(deployment)["sleep"] == "asleep"

    wakes = []
    real_wake = wake.wake_engine

    async def counted(root, timeout):
        wakes.append(root)
        return await real_wake(root, timeout)

    monkeypatch.setattr(wake, "wake_engine", counted)

    instances = _instances(deployment)

    async def first_requests():
        redis = store.aclient()
        held = await asyncio.gather(*(wake.hold(redis, instances, "qwen") for _ in range(8)))
        async with httpx.AsyncClient(base_url=url, timeout=30) as http:
            body = {"model": "qwen", "prompt": "hello", "max_tokens": 4}
            answers = await asyncio.gather(*(http.post("/v1/completions", json=body) for _ in held))
        return held, answers

    started = time.monotonic()
    held, answers = asyncio.run(first_requests())
    took = time.monotonic() - started
    assert len(wakes) == 1  # eight first requests, one wake
    assert all(
        error is None and [i.deployment_id for i in routed] == [deployment.pk] for routed, error in held
    )
    assert [answer.status_code for answer in answers] == [200] * 8
    assert took >= 0.8  # they were held for the wake (the sim's level-1 wake time)
    assert httpx.get(f"{url}/is_sleeping").json() == {"is_sleeping": False}
    assert sleep_state.asleep_level(deployment.pk) is None
    # Requests were noted: the idle clock starts again from them.
    assert sleep_state.last_request(deployment.pk) >= time.time() - 30


def test_a_failed_wake_answers_every_waiter_and_restarts_the_engine(sleepy):
    from panel.deployments import sleep_state, sleeping
    from panel.deployments.models import Deployment
    from panel.gateway import store
    from panel.gateway.instances import wake
    from panel.operations.models import Operation

    deployment, url, process = sleepy
    why = [{"text": "by hand", "params": {}}]
    assert sleeping.sleep(deployment, level=1, reason=why) is True
    stop(process)  # the engine dies while asleep

    instances = _instances(deployment)

    async def first_requests():
        redis = store.aclient()
        return await asyncio.gather(*(wake.hold(redis, instances, "qwen") for _ in range(4)))

    held = asyncio.run(first_requests())
    for routed, answer in held:
        assert routed == []
        assert answer.status == 503
        error = json.loads(answer.body)["error"]
        assert error["code"] == "wake_failed"
        assert error["type"] == "server_error"
        assert "did not wake" in error["message"]

    # What the panel task the gateway queued does: record wake_failed and restart the engine.
    failure = [{"text": "The engine did not answer: {error}", "params": {"error": "refused"}}]
    sleeping.restart_after_failed_wake(deployment.pk, failure, 0.1)
    (failed,) = _decisions("wake_failed")
    assert (failed.outcome, failed.actor) == ("failed", "gateway")
    assert sleep_state.asleep_level(deployment.pk) is None
    assert Deployment.objects.get(pk=deployment.pk).restart_count == 1
    assert Operation.objects.filter(kind="stop", target="sleepy").exists()


def test_an_operator_sleeps_and_wakes_by_hand_and_a_viewer_may_not(sleepy, bob, charlie):
    deployment, url, _process = sleepy
    operator, viewer = api_client_for(bob), api_client_for(charlie)
    assert viewer.post("/api/v1/deployments/sleepy/sleep/").status_code == 403

    for bad in ({"level": 3}, {"levle": 2}, {"level": "deep"}):
        refused = operator.post("/api/v1/deployments/sleepy/sleep/", bad, format="json")
        assert refused.status_code == 400, (bad, refused.json())
    assert httpx.get(f"{url}/is_sleeping").json() == {"is_sleeping": False}
    slept = operator.post("/api/v1/deployments/sleepy/sleep/", {"level": 2}, format="json")
    assert slept.status_code == 200, slept.json()
    assert slept.json()["sleep"] == "asleep"
    assert slept.json()["level"] == 2
    assert httpx.get(f"{url}/is_sleeping").json() == {"is_sleeping": True}
    again = operator.post("/api/v1/deployments/sleepy/sleep/")
    assert again.status_code == 409
    assert "asleep already" in again.json()["detail"]

    assert viewer.post("/api/v1/deployments/sleepy/wake/").status_code == 403
    woke = operator.post("/api/v1/deployments/sleepy/wake/")
    assert woke.status_code == 200, woke.json()
    assert woke.json()["sleep"] == "awake"
    assert woke.json()["last_wake"] is not None
    assert httpx.get(f"{url}/is_sleeping").json() == {"is_sleeping": False}
    (decision,) = _decisions("wake")
    assert (decision.actor, decision.user, decision.outcome) == ("user", bob, "done")
    shown = viewer.get("/api/v1/deployments/sleepy/sleep/").json()
    assert (shown["sleep"], shown["idle"]) == ("awake", {"sleep_after_s": 60, "level": 1})


@pytest.mark.usefixtures("_wired_to_redis")
def test_an_awake_replica_serves_while_the_other_sleeps_on():
    """With one instance awake, the sleeping one is left out and not woken (nothing is asked of it)."""
    from panel.deployments import sleep_state
    from panel.gateway import store
    from panel.gateway.instances import wake
    from panel.gateway.instances.pool import Instance

    awake = Instance(
        id="m/0", deployment_id=900001, deployment="m", base_url="http://127.0.0.1:9/v1", sealed_key=""
    )
    asleep = Instance(
        id="m-r2/0", deployment_id=900002, deployment="m-r2", base_url="http://127.0.0.1:9/v1", sealed_key=""
    )
    sleep_state.forget(awake.deployment_id)
    sleep_state.mark_asleep(asleep.deployment_id, 1)
    try:

        async def routed_to():
            return await wake.hold(store.aclient(), [awake, asleep], "m")

        routed, error = asyncio.run(routed_to())
        assert (routed, error) == ([awake], None)
        assert sleep_state.asleep_level(asleep.deployment_id) == 1  # still asleep: no wake was tried
        assert sleep_state.last_request(asleep.deployment_id) is not None  # both noted
    finally:
        sleep_state.forget(asleep.deployment_id)
