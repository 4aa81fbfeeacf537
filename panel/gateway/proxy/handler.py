"""The OpenAI-compatible gateway: /v1/models, /v1/chat/completions, /v1/completions, /v1/embeddings.

A request names a served model; the gateway checks the key (inference scope, the key's models and limits),
picks the healthy engine instance with the fewest outstanding requests and passes the request on with the
engine's own key. A request that fails before its first byte (connection refused, the engine's 5xx, a
stream cut before its first piece) is tried again on another instance; instances on a failed NPU are left
out (panel.gateway.instances.failover). Streams pass through as they arrive. Every request ends in one usage
record
(panel.gateway.accounting.usage). panel.gateway.proxy.asgi serves these answers; nothing here holds a thread.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from dataclasses import dataclass

import httpx
import orjson
from django.utils import timezone
from django.utils.translation import gettext as _

from panel.gateway import store
from panel.gateway.access import identity, limits
from panel.gateway.accounting import usage
from panel.gateway.instances import ahead, failover, routing, silence, wake
from panel.gateway.instances import pool as pools
from panel.gateway.proxy import pd, relay
from panel.gateway.proxy.errors import INVALID_REQUEST, Answer, as_openai_error, error

CLIENT_CLOSED = 499  # nginx's number for a client that went away mid-answer
GENERATING = {"/v1/chat/completions": "chat/completions", "/v1/completions": "completions"}
ROUTES = {**GENERATING, "/v1/embeddings": "embeddings"}


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    headers: dict[str, str]  # lower-case names
    body: bytes
    client: str = "unknown"  # the caller's address, as panel.core.web.client_ip reads it behind proxies

    def bearer(self) -> str | None:
        parts = self.headers.get("authorization", "").split()
        return parts[1] if len(parts) == 2 and parts[0].lower() == "bearer" else None


async def handle(request: Request) -> Answer:
    path = request.path.rstrip("/")
    if path in ROUTES:
        return await _proxy(request, ROUTES[path])
    if path == "/v1/models":
        return await _models(request)
    if path.startswith("/v1/models/"):
        return await _model(request, path.removeprefix("/v1/models/"))
    message = _(
        "No gateway route at {path}; the gateway serves /v1/models, /v1/chat/completions, /v1/completions "
        "and /v1/embeddings."
    ).format(path=request.path)
    return error(404, message, INVALID_REQUEST, "unknown_url")


class Call:
    """One request's bookkeeping, from arrival to its usage record."""

    def __init__(
        self, caller: identity.Caller, model: str, endpoint: str, stream: bool, request_id: str | None = None
    ):
        self.started = time.perf_counter()
        self.arrived = timezone.now()
        self.caller = caller
        self.model = model
        self.endpoint = endpoint
        self.stream = stream
        self.request_id = request_id or uuid.uuid4().hex
        self.attempts = 0
        self.instance: pools.Instance | None = None
        self.route: routing.Route | None = None  # what the deployment's routing policy routes it by
        # The instance given up while its engine was silent, and why (panel.gateway.instances.silence).
        self.excluded: tuple[pools.Instance, dict] | None = None

    async def end(self, redis, status: int, code: str = "", usage_found=None, ttft_ms=None) -> None:
        tokens = relay.tokens_of(usage_found)
        if tokens is None:  # the engine's usage is not numbers in range: this request records none
            code = code or "engine_usage_invalid"
            tokens = (0, 0)
        instance = self.instance
        record = usage.Finished(
            request_id=self.request_id,
            time=self.arrived.isoformat(),
            token_id=self.caller.token_id,
            key=self.caller.key,
            user_id=self.caller.user_id,
            model=self.model,
            endpoint=self.endpoint,
            stream=self.stream,
            status=status,
            error=code or "",
            prompt_tokens=tokens[0],
            completion_tokens=tokens[1],
            ttft_ms=None if ttft_ms is None else round(ttft_ms, 2),
            duration_ms=round((time.perf_counter() - self.started) * 1000, 2),
            deployment_id=instance.deployment_id if instance else None,
            deployment_name=instance.deployment if instance else "",
            instance=instance.id if instance else "",
            attempts=max(1, self.attempts),
        )
        await usage.finish(redis, self.caller, record, instance, time.time())

    async def refuse(self, redis, status: int, message: str, kind: str, code: str, **headers) -> Answer:
        await self.end(redis, status, code)
        return error(status, message, kind, code, **headers).header("x-request-id", self.request_id)


async def _caller(request: Request, model: str | None, also: tuple[str, ...] = (), ahead=None):
    """(resolved, error answer) for the request's key; `also`: keys read in the same round trip, `ahead`:
    scripts run in it (identity.resolve_cached). `resolved` is None only when no key was sent."""
    raw = request.bearer()
    if not raw:
        message = _("Send an API key with the inference scope: Authorization: Bearer <key>.")
        return None, error(401, message, INVALID_REQUEST, "invalid_api_key")
    redis = store.aclient()
    # Checked only for keys the cache does not know (each would cost the database a read): keys that called
    # recently go on, so one broken client does not block its neighbours behind the same address.
    resolved = await identity.resolve_cached(
        raw, model, guard=lambda: limits.guessing(redis, request.client), also=also, ahead=ahead
    )
    if resolved.held is not None:
        over = resolved.held
        answer = error(429, over.message, over.kind, "too_many_unknown_keys")
        return resolved, answer.header("Retry-After", str(over.retry_after))
    if resolved.caller is None:
        refusal = resolved.refusal
        assert refusal is not None, "a key resolved to no caller carries its refusal"
        if refusal.code == "invalid_api_key":
            await limits.unknown_key_sent(redis, request.client)
        return resolved, error(refusal.status, refusal.message, refusal.kind, refusal.code)
    return resolved, None


async def _proxy(request: Request, route: str) -> Answer:
    if request.method != "POST":
        return error(405, _("Use POST."), INVALID_REQUEST, "method_not_allowed", Allow="POST")
    try:
        body = orjson.loads(request.body)
    except orjson.JSONDecodeError:
        body = None
    model = body.get("model") if isinstance(body, dict) else None
    # The excluded instances (panel.gateway.instances.failover) come with the key and the pool, and the
    # instance is picked ahead by the pool last read (panel.gateway.instances.ahead): one round trip.
    named = model if isinstance(model, str) and model else None
    request_id = uuid.uuid4().hex
    planned = _plan_ahead(request, named, body, request_id)
    redis = store.aclient()
    try:
        resolved, refused = await _caller(
            request, named, also=(failover.EXCLUDED_KEY,), ahead=planned and planned.commands()
        )
    except BaseException:
        if planned is not None:
            ahead.take_back(redis, planned, None)
        raise
    pending = ahead.Pending(redis, planned, resolved.picked if resolved is not None else None)
    try:
        if refused is not None:
            return refused
        return await _serve(request, route, body, resolved, pending, request_id)
    finally:
        await pending.drop()  # picks made ahead and not used (a refusal, a client gone)


def _plan_ahead(request: Request, named: str | None, body, request_id: str) -> ahead.Ahead | None:
    """The picks to make with the key's read (panel.gateway.instances.ahead), for a request that reads it."""
    if not request.bearer() or not isinstance(body, dict):
        return None
    return ahead.plan(named, request_id, lambda: pd.prefill_id(request_id, 0, pd.prefill_request(body)))


async def _serve(
    request: Request, route: str, body, resolved, pending: ahead.Pending, request_id: str
) -> Answer:
    """A request whose key resolved: refused (and recorded), or sent to an engine."""
    model = body.get("model") if isinstance(body, dict) else None
    stream = route != "embeddings" and isinstance(body, dict) and body.get("stream") is True
    call = Call(resolved.caller, model if isinstance(model, str) else "", route, stream, request_id)
    redis = store.aclient()
    refused = await _refused_call(call, redis, body, resolved)
    if refused is not None:
        return refused
    assert isinstance(body, dict), "_refused_call refuses a body that is no JSON object"
    wants_usage = stream and bool((body.get("stream_options") or {}).get("include_usage"))
    if stream and not wants_usage:
        # Ask the engine for the usage chunk; the relay takes it out again for this client.
        body["stream_options"] = {**(body.get("stream_options") or {}), "include_usage": True}
        content = orjson.dumps(body)
    else:
        content = request.body
    pool = resolved.pool
    call.route = routing.route_for(pool.routing, pool.served_name, route, body, request.headers, call.caller)
    instances, unwoken = await wake.hold(redis, list(pool.instances), call.model, idle=pool.idle)
    if unwoken is not None:
        await call.end(redis, 503, "wake_failed")
        return unwoken.header("x-request-id", call.request_id)
    # Read again where a wake may have held the request for minutes since.
    excluded = await (failover.excluded(redis) if pool.idle else failover.excluded(redis, resolved.also[0]))
    ahead.remember(call.model, pool, excluded)
    first = await pending.claim(pool, failover.usable(instances, excluded))
    try:
        upstream = await _open(call, redis, instances, route, body, content, excluded, first)
    except asyncio.CancelledError:
        await call.end(redis, CLIENT_CLOSED, "client_closed")
        raise
    if upstream is None and call.excluded is not None:
        call.instance, cause = call.excluded  # its row names the instance, as a cut stream's does
        message, code = failover.cut_error(cause)
        return await call.refuse(redis, 502, message, "server_error", code)
    if upstream is None:
        message = _("No replica of `{model}` answered; retry shortly.").format(model=call.model)
        return await call.refuse(redis, 503, message, "server_error", "no_healthy_replica", Retry_After="5")
    content_type = upstream.headers.get("content-type", "")
    if stream and upstream.status_code == 200 and "text/event-stream" in content_type:
        watch = relay.StreamWatch(call.started, strip_usage=not wants_usage)
        answer = Answer(200, content_type=content_type.encode(), stream=Relay(call, redis, upstream, watch))
        answer.header("cache-control", "no-cache").header("x-accel-buffering", "no")
    else:
        answer = await _whole(call, redis, upstream)
    return answer.header("x-request-id", call.request_id)


async def _refused_call(call: Call, redis, body, resolved) -> Answer | None:
    """The answer refusing a call that names its caller (recorded as its usage), or None to serve it: a body
    that is no JSON object, no model named, a key that may not use it, a rate limit, no healthy replica."""
    if not isinstance(body, dict):
        return await call.refuse(
            redis, 400, _("The body must be a JSON object."), INVALID_REQUEST, "invalid_body"
        )
    if call.model == "":
        message = _('Name the model: "model": "<served model name>".')
        return await call.refuse(redis, 400, message, INVALID_REQUEST, "missing_model")
    if resolved.refusal is not None:
        refusal = resolved.refusal
        return await call.refuse(redis, refusal.status, refusal.message, refusal.kind, refusal.code)
    over = await limits.check(redis, call.caller)
    if over is not None:
        return await call.refuse(
            redis, 429, over.message, over.kind, "rate_limit_exceeded", Retry_After=str(over.retry_after)
        )
    if not resolved.pool.instances:
        message = _("No healthy replica of `{model}` is serving now; retry shortly.").format(model=call.model)
        return await call.refuse(redis, 503, message, "server_error", "no_healthy_replica", Retry_After="5")
    return None


async def _open(
    call: Call,
    redis,
    candidates: list[pools.Instance],
    route: str,
    body: dict,
    content: bytes,
    excluded: dict,
    first: tuple[pools.Instance, ...] | None = None,
):
    """The engine's response, its headers read; tried on another instance while one fails before answering
    (panel.gateway.instances.failover: the `excluded` instances are left out first). None when no instance
    answered. `body`, `content`: the request's body as the engine gets it, parsed and as JSON (a
    disaggregated request builds its prefill's and its decode's from the parsed one). `first`: the instance
    (disaggregated: the prefill and the decode) picked and counted ahead for the first try
    (panel.gateway.instances.ahead)."""
    candidates = failover.usable(candidates, excluded)
    if pd.disaggregated(candidates):  # prefill first, then decode with its KV (docs/serving-plane.md §4)
        return await pd.open_pair(call, redis, candidates, route, body, first)
    failed: list[pools.Instance] = []  # what failed it before its first byte (recorded for an admin)
    for attempt in range(failover.MAX_TRIES):
        if not candidates:
            return None
        if attempt == 0 and first:
            instance = first[0]
        else:
            instance = await pools.acquire(redis, candidates, call.request_id, call.route)
        call.attempts = attempt + 1
        call.instance = instance
        headers = {**instance.headers(), "Content-Type": "application/json", "Accept-Encoding": "identity"}
        try:
            url = f"{instance.base_url}/{route}"
            upstream = await silence.guarded(redis, instance, relay.post(url, content, headers, stream=True))
        except httpx.TransportError as failure:
            if isinstance(failure, silence.Excluded):
                call.excluded = (instance, failure.cause)
            await pools.failed(redis, instance, call.request_id)
            candidates.remove(instance)
            failed.append(instance)
            call.instance = None
            continue
        last = attempt == failover.MAX_TRIES - 1 or len(candidates) == 1
        if failover.retryable(upstream.status_code) and not last:
            await upstream.aclose()
            await pools.failed(redis, instance, call.request_id)
            candidates.remove(instance)
            failed.append(instance)
            continue
        if call.stream and upstream.status_code == 200 and not await _started(call, redis, upstream):
            await pools.failed(redis, instance, call.request_id)  # cut before its first byte: try again
            candidates.remove(instance)
            failed.append(instance)
            call.instance = None
            continue
        if failed:
            await failover.note_retry(redis, failed, instance)
        return upstream
    return None


async def _started(call: Call, redis, upstream: httpx.Response) -> bool:
    """failover.started, given up (False) when the engine stays silent and its instance is taken out."""
    try:
        return await silence.guarded(redis, call.instance, failover.started(upstream))
    except silence.Excluded as failure:
        await upstream.aclose()
        assert call.instance is not None, "a stream is started on the instance it was sent to"
        call.excluded = (call.instance, failure.cause)
        return False


async def _whole(call: Call, redis, upstream: httpx.Response) -> Answer:
    try:
        content = await silence.guarded(redis, call.instance, upstream.aread())
    except asyncio.CancelledError:
        await upstream.aclose()
        await call.end(redis, CLIENT_CLOSED, "client_closed")
        raise
    except silence.Excluded as failure:
        # Its engine went silent and the panel took it out (its node offline, its NPU failed): say so now
        # rather than after the read timeout.
        await upstream.aclose()
        message, code = failover.cut_error(failure.cause)
        await call.end(redis, 502, code)
        return error(502, message, "server_error", code)
    except httpx.HTTPError:
        await upstream.aclose()
        await call.end(redis, 502, "upstream_broken")
        return error(502, _("The engine broke off its answer."), "server_error", "upstream_broken")
    await upstream.aclose()
    status = upstream.status_code
    if status == 401:
        # The client's key was good (checked above); the engine refused the panel's.
        await call.end(redis, 502, "engine_key_refused")
        message = _("The engine refused the panel's engine key; restart the deployment.")
        return error(502, message, "server_error", "engine_key_refused")
    if status >= 400:
        try:
            reshaped = as_openai_error(orjson.loads(content), status)
        except orjson.JSONDecodeError:
            reshaped = as_openai_error(content.decode("utf-8", "replace"), status)
        if reshaped is not None:
            content = orjson.dumps(reshaped)
        code = _error_code(orjson.loads(content), status)  # JSON now, in OpenAI's shape
        await call.end(redis, status, code[:64])
        return Answer(status, content)
    await call.end(redis, status, "", relay.usage_of(content))
    return Answer(status, content, upstream.headers.get("content-type", "application/json").encode())


def _error_code(body, status: int) -> str:
    """The error code an engine's error answer names, or its status: whatever the engine sent (an error
    that is a list, a code that is an object), one bad answer costs that request only."""
    found = body.get("error") if isinstance(body, dict) else None
    code = found.get("code") if isinstance(found, dict) else None
    return str(code if isinstance(code, str | int) and code != "" else status)


# Usage records of streams that ran their course, written while the end of the body goes out (held here:
# the event loop keeps tasks only weakly).
_recording: set[asyncio.Future] = set()


class Relay:
    """A stream's answer: the engine's chunks as they come, then its usage record, exactly once, however
    it ends (the last chunk, a broken engine, a client that left, or a client never read from at all).

    A stream that ran its course is recorded beside the end of its body rather than before it: the client's
    answer is complete without waiting for that Redis round trip. `aclose` (which the ASGI edge calls once
    the body is sent) waits for the record."""

    def __init__(self, call: Call, redis, upstream: httpx.Response, watch: relay.StreamWatch):
        self.call = call
        self.redis = redis
        self.upstream = upstream
        self.watch = watch
        self.ended = False
        self.recording: asyncio.Future | None = None

    def __aiter__(self):
        return self._chunks()

    async def _chunks(self):
        status, code = 200, ""
        completed = False
        renewed = time.monotonic()
        call, watch = self.call, self.watch
        # An engine silent past silence.SILENT_S whose instance the panel took out has its connection closed
        # (a host that lost power sends no reset): the read below breaks and the stream ends naming the cause.
        dog = silence.Watchdog(self.redis, call.instance, lambda: watch.last_event, self.upstream.aclose)
        dog.start()
        try:
            # The response's own byte stream rather than aiter_raw(): the chunks pass unchanged either way,
            # and this is one layer less per chunk (panel.gateway.proxy.transport).
            async for chunk in self.upstream.stream:
                out = watch.feed(chunk)
                if out:
                    yield out
                if time.monotonic() - renewed > pools.REFRESH_S:
                    renewed = time.monotonic()
                    await pools.still_serving(self.redis, call.instance, call.request_id)
            rest = watch.rest()
            if rest:
                yield rest
            completed = True
        except httpx.HTTPError as cut:
            # Bytes already went out, so it cannot be retried: the stream ends with an error event naming
            # the cause (panel.gateway.instances.failover), which the OpenAI SDKs raise, instead of stopping
            # short without [DONE] as if it had finished.
            cause = dog.cause or await failover.cause_for(self.redis, call.instance)
            event, code = failover.cut_event(cause, cut)
            status = 502
            yield event
        except asyncio.CancelledError:
            # A client that leaves once [DONE] reached it had its whole answer: under load its going came
            # before the engine closed the stream, and a complete answer was recorded as 499.
            if not watch.done:
                status, code = CLIENT_CLOSED, "client_closed"
            raise
        finally:
            dog.stop()
            if completed:
                self.recording = asyncio.ensure_future(self._end(status, code))
                _recording.add(self.recording)
                self.recording.add_done_callback(_recording.discard)
            else:
                await self._end(status, code)

    async def _end(self, status: int, code: str) -> None:
        if self.ended:
            return
        self.ended = True
        await self.upstream.aclose()  # the engine sees the connection go and stops generating
        await self.call.end(self.redis, status, code, self.watch.usage, self.watch.ttft_ms)

    async def aclose(self) -> None:
        """Wait for the record of a stream that ran its course; record one its client left as such, unless
        [DONE] had gone out: a cancel that lands in the ASGI edge (sending the last chunk) rather than in
        `_chunks` reaches only this, and a complete answer was recorded as 499."""
        if self.recording is not None:
            await asyncio.shield(self.recording)
            return
        if self.watch.done:
            await self._end(200, "")
        else:
            await self._end(CLIENT_CLOSED, "client_closed")


async def _models(request: Request) -> Answer:
    """GET /v1/models: the served model names this key may use."""
    if request.method != "GET":
        return error(405, _("Use GET."), INVALID_REQUEST, "method_not_allowed", Allow="GET")
    resolved, refused = await _caller(request, None)
    if refused is not None:
        return refused
    if resolved.refusal is not None:
        refusal = resolved.refusal
        return error(refusal.status, refusal.message, refusal.kind, refusal.code)
    names = await identity.served_names()
    data = [_model_object(name) for name in names if resolved.caller.allows(name)]
    return Answer(200, orjson.dumps({"object": "list", "data": data}))


async def _model(request: Request, name: str) -> Answer:
    """GET /v1/models/<name>."""
    if request.method != "GET":
        return error(405, _("Use GET."), INVALID_REQUEST, "method_not_allowed", Allow="GET")
    resolved, refused = await _caller(request, name)
    if refused is not None:
        return refused
    if resolved.refusal is not None:
        refusal = resolved.refusal
        return error(refusal.status, refusal.message, refusal.kind, refusal.code)
    return Answer(200, orjson.dumps(_model_object(name)))


def _model_object(name: str) -> dict:
    return {"id": name, "object": "model", "created": 0, "owned_by": "ascend-panel"}
