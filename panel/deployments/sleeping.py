"""Sleep and wake of an `idle:` deployment's engines (issue 36 item 2; docs/serving-plane.md §3, §4).

- The leader's idle step (`idle_step`, in the reconcile tick on the beat leader) puts an engine that served
  nothing for its `sleep_after_s` to sleep: `POST /sleep?level=` on the engine, under the deployment's
  change lock (its row locked, no start or stop under way), recorded as a `sleep` decision settled with
  what the engine answered.
- A person sleeps or wakes it by hand (API, CLI: `sleep` / `wake`, operators), recorded the same way with
  the person as actor.
- The gateway wakes it for a request (panel/gateway/instances/wake.py); a wake that fails is recorded and the
engine
  restarted by `wake_failed` (a panel task, panel/deployments/tasks.py).

The state (asleep at which level, when it last had a request) is in Redis (panel/deployments/sleep_state.py);
the last wake is the newest `wake` decision. vLLM's sleep routes exist only in its dev mode, which the
launch gives only engines on loopback (docs/trust-model.md).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from datetime import datetime
from typing import Any

import httpx
from asgiref.sync import async_to_sync
from django.conf import settings
from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext as _
from django.utils.translation import gettext_noop

from panel.core.domain.choices import (
    DecisionActor,
    DecisionKind,
    DecisionOutcome,
    DeploymentState,
    DesiredState,
)
from panel.core.domain.translated import in_language
from panel.deployments import decisions, reasons, services, sleep_state
from panel.deployments.conflicts import DeploymentConflict
from panel.deployments.decision_models import Decision
from panel.deployments.models import Deployment
from panel.deployments.placement import hbm
from panel.deployments.rollouts.drain import still_served
from panel.deployments.sleep_state import can_sleep
from panel.deployments.spec.spec import idle_of

log = logging.getLogger(__name__)

SLEEP_TIMEOUT_S = 120.0  # level 2 drops the weights at once; level 1 copies them to host memory first
POLL_S = 0.2
# /sleep, /wake_up and /is_sleeping answer a few bytes. The engine is an input (docs/trust-model.md): what it
# sends past this is not read, so a hostile answer costs its own call and never the process's memory.
ANSWER_LIMIT = 64 * 1024


def wake_timeout_s() -> float:
    return float(getattr(settings, "PANEL_WAKE_TIMEOUT_S", 300.0))


def engine_root(deployment: Deployment) -> str:
    """http://host:port of the engine's API server (its /sleep routes are beside /v1, not under it)."""
    return services.engine_url(deployment).removesuffix("/v1")


def state_of(deployment: Deployment) -> dict[str, Any]:
    """What the page and the API show: {"sleep": "asleep" | "awake" | None, "level", "last_wake", "idle"}."""
    if not can_sleep(deployment):
        return {"sleep": None, "level": None, "last_wake": None, "idle": idle_of(deployment)}
    level = sleep_state.asleep_level(deployment.pk)
    woke = decisions.last(deployment, DecisionKind.WAKE)
    return {
        "sleep": "asleep" if level is not None else "awake",
        "level": level,
        "last_wake": woke.time.isoformat() if woke is not None else None,
        "idle": idle_of(deployment),
    }


def _refuse_unless_serving(locked: Deployment) -> None:
    if not can_sleep(locked):
        raise DeploymentConflict(
            _(
                "{name} was not deployed with idle:, so its engine cannot sleep; add idle: to its spec."
            ).format(name=locked.name)
        )
    if locked.desired_state != DesiredState.RUNNING or locked.observed_state != DeploymentState.RUNNING:
        raise DeploymentConflict(_("{name} is not running.").format(name=locked.name))
    if services.active_operations(locked).exists():
        raise DeploymentConflict(_("Wait for the current start or stop to finish."))


def sleep(
    deployment: Deployment,
    *,
    level: int | None = None,
    reason: list[dict],
    figures: dict | None = None,
    actor: str = DecisionActor.LEADER,
    user=None,
) -> bool:
    """Put the engine to sleep; whether it sleeps now. Raises DeploymentConflict when it cannot (not an idle
    deployment, not running, a change under way, asleep already). The row stays locked while the engine
    is asked (the deployment's change lock): no apply, scale or restart runs beside it."""
    level = level or (idle_of(deployment) or {}).get("level") or 1
    with transaction.atomic():
        locked = Deployment.objects.select_for_update().get(pk=deployment.pk)
        _refuse_unless_serving(locked)
        if sleep_state.asleep_level(locked.pk) is not None:
            raise DeploymentConflict(_("{name} is asleep already.").format(name=locked.name))
        decision = decisions.record(
            locked, DecisionKind.SLEEP, reason=reason, figures={"level": level, **(figures or {})},
            actor=actor, user=user,
        )  # fmt: skip
        # Marked first: a request that comes while the engine goes to sleep waits for a wake, not for an
        # engine that holds it unanswered.
        sleep_state.mark_asleep(locked.pk, level)
        url = f"{engine_root(locked)}/sleep"  # read here: the database is not for the event loop's thread
        failure = async_to_sync(_ask)("POST", url, {"level": level}, timeout=SLEEP_TIMEOUT_S)
        if failure is None:
            decisions.settle(decision, DecisionOutcome.DONE)
            return True
        sleep_state.mark_awake(locked.pk)
        decisions.settle(decision, DecisionOutcome.FAILED, failure)
    return False


def wake(
    deployment: Deployment,
    *,
    reason: list[dict],
    actor: str = DecisionActor.USER,
    user=None,
    figures: dict | None = None,
) -> float:
    """Wake the engine and wait until vLLM says it is awake; the seconds it took. Raises DeploymentConflict
    when it is not asleep or cannot be woken (the `wake_failed` decision says why). A level-2 sleeper whose
    NPUs have no room for it any more is not asked at all (`no_room`)."""
    with transaction.atomic():
        locked = Deployment.objects.select_for_update().get(pk=deployment.pk)
        _refuse_unless_serving(locked)
        if sleep_state.asleep_level(locked.pk) is None:
            raise DeploymentConflict(_("{name} is awake.").format(name=locked.name))
    crowded = no_room(deployment, actor=actor, user=user)
    if crowded is not None:
        raise DeploymentConflict(_("{name} did not wake: {why}").format(name=deployment.name, why=crowded))
    started = time.monotonic()
    failure = async_to_sync(wake_engine)(engine_root(deployment), wake_timeout_s())
    took = round(time.monotonic() - started, 3)
    figures = {**(figures or {}), "wake_s": took}
    with transaction.atomic():
        if failure is not None:
            decisions.record(
                deployment, DecisionKind.WAKE_FAILED, reason=failure, figures=figures,
                actor=actor, user=user, outcome=DecisionOutcome.FAILED,
            )  # fmt: skip
        else:
            sleep_state.mark_awake(deployment.pk)
            sleep_state.touch(deployment.pk)  # its idle clock starts again: woken to serve, not to sleep
            decisions.record(
                deployment, DecisionKind.WAKE, reason=reason, figures=figures,
                actor=actor, user=user, outcome=DecisionOutcome.DONE,
            )  # fmt: skip
    if failure is not None:
        raise DeploymentConflict(
            _("{name} did not wake: {why}").format(name=deployment.name, why=reasons.english(failure))
        )
    return took


def no_room(deployment: Deployment, *, actor: str = DecisionActor.GATEWAY, user=None) -> str | None:
    """Why a level-2 sleeper cannot wake now (another deployment took its HBM: placement/hbm.py `wake_room`),
    in the request's language, or None when it may. The `wake_failed` it is recorded as is written once, not
    for each request or tick that finds the same: not again while the engine's last wake decision is that
    same refusal. The engine is left asleep, not restarted: a restart would need the same room."""
    why = hbm.wake_room(deployment)
    if why is None:
        return None
    with transaction.atomic():
        Deployment.objects.select_for_update().filter(pk=deployment.pk).first()  # one writer at a time
        if _last_wake_decision_said(deployment, why) is False:
            decisions.record(
                deployment, DecisionKind.WAKE_FAILED, reason=why, figures={"level": hbm.RELEASED_AT_LEVEL},
                actor=actor, user=user, outcome=DecisionOutcome.FAILED,
            )  # fmt: skip
    return in_language(why)


def _last_wake_decision_said(deployment: Deployment, why: list[dict]) -> bool:
    """Whether this engine's newest sleep, wake or wake_failed decision is a wake_failed saying `why`."""
    primary = deployment.replica_of or deployment
    replica = "" if primary.pk == deployment.pk else deployment.name
    newest = (
        Decision.objects.filter(
            deployment=primary,
            replica=replica,
            kind__in=(DecisionKind.SLEEP, DecisionKind.WAKE, DecisionKind.WAKE_FAILED),
        )
        .order_by("-time", "-id")
        .first()
    )
    return (
        newest is not None
        and newest.kind == DecisionKind.WAKE_FAILED
        and _refusal(newest.reason_parts) == _refusal(why)
    )


def _refusal(parts: list[dict]) -> list[tuple]:
    """What makes two refusals the same: which NPUs and who holds them, not the free figure of the moment
    (each sample moves it a little)."""
    keys = ("node", "id", "holders")
    return [(part["text"], *(part["params"].get(key) for key in keys)) for part in parts]


async def aread_bounded(answer: httpx.Response) -> bytes:
    """An engine's streamed answer, at most ANSWER_LIMIT bytes of it."""
    body = bytearray()
    async for chunk in answer.aiter_bytes():
        body += chunk[: ANSWER_LIMIT - len(body)]
        if len(body) >= ANSWER_LIMIT:
            break
    return bytes(body)


def says_awake(status: int, body: bytes) -> bool:
    """An /is_sleeping answer that says the engine is awake; anything else (a junk body too) is not yet."""
    try:
        return status == 200 and json.loads(body).get("is_sleeping") is False
    except (ValueError, AttributeError):
        return False


def answered_with(status: int, body: bytes) -> list[dict]:
    return [
        reasons.part(
            gettext_noop("The engine answered {status}: {text}"),
            status=status,
            text=body[:200].decode(errors="replace"),
        )
    ]


async def wake_engine(root: str, timeout_s: float) -> list[dict] | None:
    """POST /wake_up, then GET /is_sleeping until it says false; None when awake, else why not (parts).
    One wake for both callers: the gateway awaits it in its event loop, `wake` (a page, the API, the
    autoscaler) runs it through async_to_sync."""
    deadline = time.monotonic() + timeout_s
    async with httpx.AsyncClient(timeout=httpx.Timeout(min(timeout_s, 60.0), connect=5.0)) as http:
        failure = await _answer_failure(http, "POST", f"{root}/wake_up", None)
        if failure is not None:
            return failure
        while time.monotonic() < deadline:
            try:
                async with http.stream("GET", f"{root}/is_sleeping") as answer:
                    if says_awake(answer.status_code, await aread_bounded(answer)):
                        return None
            except httpx.HTTPError:
                pass
            await asyncio.sleep(POLL_S)
    return [
        reasons.part(gettext_noop("The engine still sleeps after {seconds} s."), seconds=round(timeout_s))
    ]


async def _ask(method: str, url: str, params: dict | None, timeout: float):
    async with httpx.AsyncClient(timeout=httpx.Timeout(timeout, connect=5.0)) as http:
        return await _answer_failure(http, method, url, params)


async def _answer_failure(
    http: httpx.AsyncClient, method: str, url: str, params: dict | None
) -> list[dict] | None:
    """None when the engine answered 200, else why not (parts)."""
    try:
        async with http.stream(method, url, params=params) as answer:
            status, body = answer.status_code, await aread_bounded(answer)
    except httpx.HTTPError as error:
        return [reasons.part(gettext_noop("The engine did not answer: {error}"), error=str(error)[:200])]
    return answered_with(status, body) if status != 200 else None


def idle_step(now: datetime | None = None) -> int:
    """The leader's pass: put each engine to sleep that served nothing for its `sleep_after_s`. How many
    went to sleep. An engine seen for the first time starts its clock now."""
    clock = (now or timezone.now()).timestamp()
    slept = 0
    rows = Deployment.objects.filter(desired_state=DesiredState.RUNNING, spec__enable_sleep_mode=True)
    for deployment in rows.order_by("pk"):
        if deployment.observed_state != DeploymentState.RUNNING:
            sleep_state.forget(deployment.pk)  # (re)starting: it comes up awake
            continue
        if sleep_state.asleep_level(deployment.pk) is not None:
            continue
        if _idle_enough(deployment, clock):
            slept += _sleep_idle(deployment, clock)
    return slept


def _idle_enough(deployment: Deployment, clock: float) -> bool:
    idle = idle_of(deployment)
    last = sleep_state.last_request(deployment.pk)
    if idle is None:
        return False
    if last is None:
        sleep_state.touch(deployment.pk, clock)
        return False
    return clock - last >= idle["sleep_after_s"] and not still_served(deployment)


def _sleep_idle(deployment: Deployment, clock: float) -> int:
    idle = idle_of(deployment) or {}
    quiet = round(clock - (sleep_state.last_request(deployment.pk) or clock))
    why = [
        reasons.part(
            gettext_noop("No request for {quiet} s (idle: sleeps after {after} s)"),
            quiet=quiet,
            after=idle.get("sleep_after_s"),
        )
    ]
    try:
        return int(
            sleep(
                deployment,
                level=idle.get("level"),
                reason=why,
                figures={"idle_s": quiet, "sleep_after_s": idle.get("sleep_after_s", 0)},
            )  # fmt: skip
        )
    except DeploymentConflict as error:
        log.info("idle step: %s not put to sleep: %s", deployment.name, error)
        return 0


def restart_after_failed_wake(deployment_id: int, why: list[dict], wake_s: float) -> None:
    """The gateway's wake failed: record it and restart the engine (it comes up awake), in one transaction."""
    deployment = Deployment.objects.filter(pk=deployment_id).first()
    if deployment is None:
        return
    with transaction.atomic():
        decisions.record(
            deployment, DecisionKind.WAKE_FAILED, reason=why, figures={"wake_s": wake_s},
            actor=DecisionActor.GATEWAY, outcome=DecisionOutcome.FAILED,
        )  # fmt: skip
        restart_unwoken(deployment)


def restart_unwoken(deployment: Deployment) -> None:
    """An engine that did not wake is restarted (it comes up awake), unless it is being stopped or started."""
    sleep_state.forget(deployment.pk)
    if (
        deployment.desired_state == DesiredState.RUNNING
        and not services.active_operations(deployment).exists()
    ):
        services.restart(
            deployment, reason=[reasons.part(gettext_noop("Restarted: its engine did not wake"))]
        )
