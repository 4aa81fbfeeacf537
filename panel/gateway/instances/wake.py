"""The gateway's part of sleep (docs/serving-plane.md §4): a request for a sleeping deployment is held while
one wake runs, then served.

`hold` is called once per request with the pool's instances. For a pool none of whose engines can sleep
(no `idle:`, panel.gateway.instances.pool.Pool.idle) it does nothing and costs no round trip. Otherwise it
notes the request (the leader's idle step counts quiet time from it) and, when every instance sleeps, wakes
them:
`POST /wake_up`, then `GET /is_sleeping` until vLLM says false. One wake per engine runs at a time across
every web process (a Redis lock, panel/deployments/sleep_state.py): concurrent first requests wait for that
wake's outcome. When an awake instance is there, the sleeping ones are left out and stay asleep.

A wake that fails answers an OpenAI-shaped 503 naming why, to the request that woke and to those that
waited; a panel task records `wake_failed` and restarts the engine (panel/deployments/sleeping.py). A wake
that worked is recorded as `wake` through decisions.record_later. Nothing here writes database rows.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid

from django.utils.translation import gettext as _
from django.utils.translation import gettext_noop

from panel.core.domain.choices import DecisionActor, DecisionKind, DecisionOutcome
from panel.deployments import decisions, reasons, sleep_state
from panel.deployments.models import Deployment
from panel.deployments.sleeping import (
    POLL_S,
    no_room,
    wake_engine,
    wake_timeout_s,
)
from panel.deployments.tasks import restart_after_failed_wake
from panel.gateway.instances.pool import Instance
from panel.gateway.proxy.errors import Answer, error

log = logging.getLogger(__name__)


async def hold(
    redis, instances: list[Instance], model: str, *, idle: bool = True
) -> tuple[list[Instance], Answer | None]:
    """(the instances to route to, None), or ([], an error answer) when none could be woken. `idle`: whether
    any of them can sleep (the pool's `idle`); when not, there is nothing to note or wake."""
    ids = sorted({instance.deployment_id for instance in instances}) if idle else []
    if not ids:
        return instances, None
    now = repr(time.time())
    async with redis.pipeline(transaction=False) as pipeline:
        for deployment_id in ids:
            pipeline.set(sleep_state.last_key(deployment_id), now, ex=sleep_state.LAST_TTL_S)
        for deployment_id in ids:
            pipeline.get(sleep_state.asleep_key(deployment_id))
        found = (await pipeline.execute())[len(ids) :]
    asleep = {deployment_id for deployment_id, level in zip(ids, found, strict=True) if level}
    if not asleep:
        return instances, None
    awake = [instance for instance in instances if instance.deployment_id not in asleep]
    if awake:
        return awake, None
    first = {instance.deployment_id: instance for instance in reversed(instances)}
    outcomes = await asyncio.gather(*(wake_one(redis, first[i], model) for i in sorted(asleep)))
    woken = {i for i, failure in zip(sorted(asleep), outcomes, strict=True) if failure is None}
    if woken:
        return [instance for instance in instances if instance.deployment_id in woken], None
    why = next(failure for failure in outcomes if failure)
    if why.startswith(sleep_state.NO_ROOM_MARK):  # left asleep, not restarted: no retry helps until room
        message = _("`{model}` is asleep and has no room to wake: {why}").format(
            model=model, why=why.removeprefix(sleep_state.NO_ROOM_MARK)
        )
        return [], error(503, message, "server_error", "wake_failed")
    message = _("`{model}` was asleep and did not wake: {why} It is being restarted; retry shortly.").format(
        model=model, why=why
    )
    return [], error(503, message, "server_error", "wake_failed", Retry_After="30")


async def wake_one(redis, instance: Instance, model: str) -> str | None:
    """Wake one engine, or wait for the wake another request started; None when awake, else why not."""
    deployment_id = instance.deployment_id
    timeout = wake_timeout_s()
    deadline = time.monotonic() + timeout + 5
    while time.monotonic() < deadline:
        token, lock = uuid.uuid4().hex, sleep_state.waking_key(deployment_id)
        if await redis.set(lock, token, nx=True, px=int((timeout + 5) * 1000)):
            try:
                return await _wake(redis, instance, model, timeout)
            finally:
                await redis.eval(sleep_state.RELEASE, 1, lock, token)
        outcome = await _wait_for_wake(redis, deployment_id, deadline)
        if outcome != "again":
            return outcome
    return _("it did not wake within {seconds} s.").format(seconds=round(timeout))


async def _wait_for_wake(redis, deployment_id: int, deadline: float) -> str | None:
    """Another request wakes it: None once awake, its error once failed, "again" when the waker went away
    without an outcome (its process died: this request takes the wake over)."""
    while time.monotonic() < deadline:
        await asyncio.sleep(POLL_S)
        async with redis.pipeline(transaction=False) as pipeline:
            pipeline.exists(sleep_state.asleep_key(deployment_id))
            pipeline.get(sleep_state.wake_failed_key(deployment_id))
            pipeline.exists(sleep_state.waking_key(deployment_id))
            asleep, failed, waking = await pipeline.execute()
        if failed:
            return failed
        if not asleep:
            return None
        if not waking:
            return "again"
    return _("it did not wake in time.")


async def _wake(redis, instance: Instance, model: str, timeout: float) -> str | None:
    deployment_id = instance.deployment_id
    # A level-2 sleeper's HBM may have gone to another deployment: then it is not asked to wake (nor
    # restarted); the refusal, recorded once by the panel's side, answers this request and its waiters.
    crowded = await asyncio.to_thread(_no_room, deployment_id)
    if crowded is not None:
        text = sleep_state.NO_ROOM_MARK + crowded
        await redis.set(sleep_state.wake_failed_key(deployment_id), text, ex=sleep_state.WAKE_FAILED_TTL_S)
        return text
    root = instance.base_url.removesuffix("/v1")
    started = time.monotonic()
    failure = await wake_engine(root, timeout)
    took = round(time.monotonic() - started, 3)
    if failure is None:
        await redis.delete(sleep_state.asleep_key(deployment_id))
        why = [reasons.part(gettext_noop("A request for {model} came while it slept"), model=model)]
        await asyncio.to_thread(
            decisions.record_later, deployment_id, DecisionKind.WAKE, reason=why, figures={"wake_s": took},
            actor=DecisionActor.GATEWAY, outcome=DecisionOutcome.DONE,
        )  # fmt: skip
        return None
    text = reasons.english(failure)
    log.warning("wake of %s failed after %.1f s: %s", instance.deployment, took, text)
    await redis.set(sleep_state.wake_failed_key(deployment_id), text, ex=sleep_state.WAKE_FAILED_TTL_S)
    await asyncio.to_thread(_queue_restart, restart_after_failed_wake, deployment_id, failure, took)
    return text


def _no_room(deployment_id: int) -> str | None:
    deployment = Deployment.objects.filter(pk=deployment_id).first()
    return None if deployment is None else no_room(deployment)


def _queue_restart(task, deployment_id: int, failure: list[dict], took: float) -> None:
    try:
        task.delay(deployment_id, failure, took)
    except Exception:  # a broker that does not take it: logged; the leader's probes still see the engine
        log.exception("restart after the failed wake of deployment %s not queued", deployment_id)
