"""Failover in the gateway (docs/serving-plane.md §4, §6): which instances are `excluded`, trying a request
again elsewhere, and the error that ends a stream cut mid-way.

An instance is excluded when an NPU it runs on is `failed` (Npu.health_state), its node is draining (a drain
that stops this deployment is under way) or its node is offline (silent past three heartbeats: a host that
lost power answers nothing, and a request sent there waits for its connect timeout). The panel decides that
from the database and writes the excluded instance ids, with why, to one sealed Redis entry (`gw:excluded`)
the moment an NPU's health or a node's status changes (`publish`, on commit) and on every reconcile tick (so
the entry outlives no change by more than a tick and expires on its own). The gateway reads that entry before
each pick and only ever takes instances *out* of the pool the database built (panel.gateway.instances.pool):
an entry that is stale, or that someone other than the panel wrote (refused by its seal), can exclude at
worst, never add an engine. The pool itself also leaves excluded instances out when it is read from the
database, so once the pool's own cache turns over the database alone keeps them out.

A request that has not sent a byte to its client is tried on another instance, up to MAX_TRIES in all,
when the engine could not be reached or answered with a status that says "not now" (5xx, or 401: the
engine holds another key than the panel's) — never on the client's own errors (4xx). A stream cut mid-way
cannot be retried (its client has part of an answer): it ends with an OpenAI-shaped error event naming the
cause, the failed NPU where the panel knows it.
"""

from __future__ import annotations

import asyncio
import logging
from typing import cast

import httpx
import orjson
from django.db.models import Q
from django.utils.translation import gettext as _
from django.utils.translation import gettext_noop

from panel.core.domain.choices import (
    DecisionActor,
    DecisionKind,
    DecisionOutcome,
    DesiredState,
    NodeStatus,
    NpuHealthState,
)
from panel.deployments import decisions
from panel.deployments.models import Deployment
from panel.deployments.reasons import part
from panel.gateway import sealing, store

log = logging.getLogger(__name__)

EXCLUDED_KEY = f"{store.PREFIX}excluded"
# Written on each health change and each reconcile tick; a panel that stops writing lets it lapse, and the
# pool (read from the database) still leaves out what the database says is excluded.
EXCLUDED_TTL_S = 120
RETRY_NOTE_S = 60  # a retry away from an instance is recorded at most this often per instance
MAX_TRIES = 3  # a request is sent to at most this many instances before the client gets a 503
# The engine cannot serve now, another instance may. 401: the engine holds another key than the panel's
# (started before the key changed), which is the gateway's problem, not the client's.
RETRY_STATUSES = frozenset({401, 500, 502, 503, 504})

NPU_FAILED = "npu_failed"
NODE_DRAINING = "node_draining"
NODE_OFFLINE = "node_offline"


def instance_ids(deployment: Deployment) -> list[str]:
    """What the pool calls the deployment's engine instances (one: its head node's API server)."""
    return [f"{deployment.name}/0"]


def _npu_cause(npu) -> dict:
    reason = npu.health_reason if isinstance(npu.health_reason, dict) else {}
    return {
        "cause": NPU_FAILED,
        "node": npu.node.name,
        "npu": npu.npu_id,
        "chip": npu.chip_id,
        "signal": str(reason.get("signal") or ""),
        "detail": str(reason.get("detail") or "")[:200],
    }


def cause_of(deployment: Deployment) -> dict | None:
    """Why the deployment's instances are excluded ({"cause", "node", ...}), or None when they may serve."""
    failed = deployment.npus.filter(health_state=NpuHealthState.FAILED).select_related("node")
    npu = failed.order_by("node__name", "npu_id", "chip_id").first()
    if npu is not None:
        return _npu_cause(npu)
    offline = deployment.nodes.filter(status=NodeStatus.OFFLINE).order_by("name").first()
    if offline is not None:
        return {"cause": NODE_OFFLINE, "node": offline.name}
    for node in deployment.nodes.filter(cordoned=True).order_by("name"):
        if deployment.name in (node.drained or []):  # a drain stops it there (SQLite has no JSON contains)
            return {"cause": NODE_DRAINING, "node": node.name}
    return None


def exclusions() -> dict[str, dict]:
    """Every excluded instance id of a deployment wanted running, with why; from the database."""
    candidates = (
        Deployment.objects.filter(desired_state=DesiredState.RUNNING)
        .filter(
            Q(npus__health_state=NpuHealthState.FAILED)
            | Q(nodes__cordoned=True)
            | Q(nodes__status=NodeStatus.OFFLINE)
        )
        .distinct()
        .order_by("pk")
    )
    found = {}
    for deployment in candidates:
        cause = cause_of(deployment)
        if cause is not None:
            found.update(dict.fromkeys(instance_ids(deployment), cause))
    return found


def publish() -> dict[str, dict]:
    """Write the excluded instances to Redis for every gateway process (sealed, with a TTL); returns them.
    Never raises: a Redis that is away leaves the pool's own database check to keep them out."""
    found = exclusions()
    try:
        store.client().set(EXCLUDED_KEY, sealing.seal(EXCLUDED_KEY, found, EXCLUDED_TTL_S), ex=EXCLUDED_TTL_S)
    except Exception:
        log.exception("could not publish the gateway's excluded instances")
    return found


_UNREAD = object()


async def excluded(redis, stored=_UNREAD) -> dict[str, dict]:
    """The excluded instances as the panel last wrote them; {} when there is no entry or it is not the
    panel's (refused and counted: the database's pool still stands). `stored`: the entry as the caller read
    it already (in the same round trip as other keys, panel.gateway.proxy.handler), else it is read here."""
    if stored is _UNREAD:
        stored = await redis.get(EXCLUDED_KEY)
    if stored is None:
        return {}
    try:
        found = sealing.opened(EXCLUDED_KEY, stored)
    except (sealing.Unsealed, ValueError, KeyError) as error:
        await sealing.refused(redis, "gateway-excluded", str(error))
        return {}
    return found if isinstance(found, dict) else {}


def usable(candidates: list, found: dict[str, dict]) -> list:
    """The candidates (the database's pool) minus the excluded ones: this can only take instances out."""
    return [instance for instance in candidates if instance.id not in found]


class _Started(httpx.AsyncByteStream):
    """An engine's stream whose first piece was read already (`started`): that piece, then the rest."""

    def __init__(self, first: bytes, rest, original: httpx.AsyncByteStream):
        self._first, self._rest, self._original = first, rest, original

    async def __aiter__(self):
        yield self._first
        async for piece in self._rest:
            yield piece

    async def aclose(self) -> None:
        await self._original.aclose()


async def started(upstream: httpx.Response) -> bool:
    """Read a stream's first piece before anything goes to the client: False (and the response closed)
    when the engine broke off before it, so the request can still go to another instance untouched."""
    original = cast(httpx.AsyncByteStream, upstream.stream)  # an AsyncClient's response
    pieces = original.__aiter__()
    try:
        first = await pieces.__anext__()
    except (httpx.HTTPError, StopAsyncIteration):
        await upstream.aclose()
        return False
    upstream.stream = _Started(first, pieces, original)
    return True


def retried_key(instance_id: str) -> str:
    return f"{store.PREFIX}retried:{instance_id}"


async def note_retry(redis, failed: list, served) -> None:
    """Requests went to `served` after `failed` instances failed them before their first byte: record it
    for an admin (a `request_retried` decision on the failed instance's deployment, by a panel task, never
    from the request path), at most once a minute per failed instance. Never raises: the answer is on its
    way."""
    for instance in failed:
        try:
            if not await redis.set(retried_key(instance.id), "1", nx=True, ex=RETRY_NOTE_S):
                continue
            cause = (await excluded(redis)).get(instance.id)
            reason = [
                part(
                    gettext_noop(
                        "The gateway sent requests that {instance} failed before their first byte to {other}."
                    ),
                    instance=instance.id,
                    other=served.id,
                )
            ]
            if cause is not None and cause.get("cause") == NPU_FAILED:
                reason.append(part(gettext_noop("Its NPU {npu} failed."), npu=cause.get("npu")))
            await asyncio.to_thread(
                decisions.record_later,
                instance.deployment_id,
                DecisionKind.REQUEST_RETRIED,
                reason=reason,
                figures={"window_s": RETRY_NOTE_S},
                actor=DecisionActor.GATEWAY,
                outcome=DecisionOutcome.DONE,
            )
        except Exception:
            log.warning("could not record a retry away from %s", instance.id, exc_info=True)


def retryable(status: int) -> bool:
    return status in RETRY_STATUSES


# What a stream cut by a known cause says, by that cause (its code in the error); filled from the cause.
CUT_TEXTS = {
    NPU_FAILED: gettext_noop(
        "NPU {npu} on node {node} failed ({signal}) while this answer was streaming; the answer is "
        "incomplete. Send the request again: another replica serves it."
    ),
    NODE_DRAINING: gettext_noop(
        "Node {node} is being drained and its engine stopped mid-stream; the answer is incomplete. "
        "Send the request again: another replica serves it."
    ),
    NODE_OFFLINE: gettext_noop(
        "Node {node} stopped answering (offline: no heartbeat) while this answer was streaming; the "
        "answer is incomplete. Send the request again: another replica serves it."
    ),
}


def _cause_text(cause: dict | None, error: BaseException | None) -> tuple[str, str]:
    """(message, code) for a stream cut mid-way."""
    if cause is not None and cause.get("cause") in CUT_TEXTS:
        code = cause["cause"]
        message = _(CUT_TEXTS[code]).format(
            npu=cause.get("npu"), node=cause.get("node"), signal=cause.get("signal") or "-"
        )
        return message, code
    if isinstance(error, httpx.TimeoutException):
        message = _("The engine stopped answering mid-stream (timed out); the answer is incomplete.")
    else:
        kind = type(error).__name__ if error is not None else "-"
        message = _(
            "The engine's connection broke off mid-stream ({error}); the answer is incomplete."
        ).format(error=kind)
    return message, "upstream_broken"


def cut_error(cause: dict) -> tuple[str, str]:
    """(message, code) for a request given up because its instance was excluded for `cause`."""
    return _cause_text(cause, None)


def cut_event(cause: dict | None, error: BaseException | None = None) -> tuple[bytes, str]:
    """The SSE event that ends a stream cut mid-way, in OpenAI's error shape (the SDKs raise it), and its
    code for the usage record."""
    message, code = _cause_text(cause, error)
    body = {"error": {"message": message, "type": "server_error", "param": None, "code": code}}
    return b"data: " + orjson.dumps(body) + b"\n\n", code


async def cause_for(redis, instance) -> dict | None:
    """Why `instance` is excluded now, as the panel wrote it (None: not excluded, or Redis is away)."""
    if instance is None:
        return None
    try:
        return (await excluded(redis)).get(instance.id)
    except Exception:  # the stream already broke; naming the cause is best effort
        log.warning("could not read the excluded instances for a cut stream", exc_info=True)
        return None
