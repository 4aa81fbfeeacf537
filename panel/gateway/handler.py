"""The OpenAI-compatible gateway: /v1/models, /v1/chat/completions, /v1/completions, /v1/embeddings.

A request names a served model; the gateway checks the key (inference scope, the key's models and limits),
picks the healthy engine instance with the fewest outstanding requests and passes the request on with the
engine's own key. A request that fails before its first byte (connection refused, the engine's 5xx) is
tried once more on another instance. Streams pass through as they arrive. Every request ends in one usage
record (panel.gateway.usage). panel.gateway.asgi serves these answers; nothing here holds a thread.
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

from panel.gateway import identity, limits, relay, store, usage
from panel.gateway import pool as pools
from panel.gateway.errors import INVALID_REQUEST, Answer, as_openai_error, error

# The engine answered but cannot serve now: another instance may. 401 means the engine holds another key
# than the panel's (started before the key changed), which is the gateway's problem, not the client's.
RETRY_STATUSES = frozenset({401, 500, 502, 503, 504})
CLIENT_CLOSED = 499  # nginx's number for a client that went away mid-answer
BROKEN_STREAM_EVENT = (
    b"data: "
    + orjson.dumps(
        {
            "error": {
                "message": "The engine stopped answering mid-stream; the answer is incomplete.",
                "type": "server_error",
                "param": None,
                "code": "upstream_broken",
            }
        }
    )
    + b"\n\n"
)
GENERATING = {"/v1/chat/completions": "chat/completions", "/v1/completions": "completions"}
ROUTES = {**GENERATING, "/v1/embeddings": "embeddings"}


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    headers: dict[str, str]  # lower-case names
    body: bytes
    client: str = "unknown"  # the caller's address, as panel.core.client_ip reads it behind proxies

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

    def __init__(self, caller: identity.Caller, model: str, endpoint: str, stream: bool):
        self.started = time.perf_counter()
        self.arrived = timezone.now()
        self.caller = caller
        self.model = model
        self.endpoint = endpoint
        self.stream = stream
        self.request_id = uuid.uuid4().hex
        self.attempts = 0
        self.instance: pools.Instance | None = None

    async def end(self, redis, status: int, code: str = "", usage_found=None, ttft_ms=None) -> None:
        found = usage_found or {}
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
            prompt_tokens=int(found.get("prompt_tokens") or 0),
            completion_tokens=int(found.get("completion_tokens") or 0),
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


async def _caller(request: Request, model: str | None):
    """(resolved, error answer) for the request's key."""
    raw = request.bearer()
    if not raw:
        message = _("Send an API key with the inference scope: Authorization: Bearer <key>.")
        return None, error(401, message, INVALID_REQUEST, "invalid_api_key")
    redis = store.aclient()
    # Checked only for keys the cache does not know (each would cost the database a read): keys that called
    # recently go on, so one broken client does not block its neighbours behind the same address.
    resolved = await identity.resolve_cached(raw, model, guard=lambda: limits.guessing(redis, request.client))
    if resolved.held is not None:
        over = resolved.held
        answer = error(429, over.message, over.kind, "too_many_unknown_keys")
        return None, answer.header("Retry-After", str(over.retry_after))
    if resolved.caller is None:
        if resolved.refusal.code == "invalid_api_key":
            await limits.unknown_key_sent(redis, request.client)
        refusal = resolved.refusal
        return None, error(refusal.status, refusal.message, refusal.kind, refusal.code)
    return resolved, None


async def _proxy(request: Request, route: str) -> Answer:
    if request.method != "POST":
        return error(405, _("Use POST."), INVALID_REQUEST, "method_not_allowed", Allow="POST")
    try:
        body = orjson.loads(request.body)
    except orjson.JSONDecodeError:
        body = None
    model = body.get("model") if isinstance(body, dict) else None
    resolved, refused = await _caller(request, model if isinstance(model, str) and model else None)
    if refused is not None:
        return refused
    stream = route != "embeddings" and isinstance(body, dict) and body.get("stream") is True
    call = Call(resolved.caller, model if isinstance(model, str) else "", route, stream)
    redis = store.aclient()
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

    wants_usage = stream and bool((body.get("stream_options") or {}).get("include_usage"))
    if stream and not wants_usage:
        # Ask the engine for the usage chunk; the relay takes it out again for this client.
        body["stream_options"] = {**(body.get("stream_options") or {}), "include_usage": True}
        content = orjson.dumps(body)
    else:
        content = request.body
    try:
        upstream = await _open(call, redis, list(resolved.pool.instances), route, content)
    except asyncio.CancelledError:
        await call.end(redis, CLIENT_CLOSED, "client_closed")
        raise
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


async def _open(call: Call, redis, candidates: list[pools.Instance], route: str, content: bytes):
    """The engine's response, its headers read; tried on a second instance when the first fails before
    answering. None when no instance answered."""
    http = relay.client()
    for attempt in range(2):
        if not candidates:
            return None
        instance = await pools.acquire(redis, candidates, call.request_id)
        call.attempts = attempt + 1
        call.instance = instance
        headers = {**instance.headers(), "Content-Type": "application/json", "Accept-Encoding": "identity"}
        try:
            upstream = await http.send(
                http.build_request("POST", f"{instance.base_url}/{route}", content=content, headers=headers),
                stream=True,
            )
        except httpx.TransportError:
            await pools.failed(redis, instance, call.request_id)
            candidates.remove(instance)
            call.instance = None
            continue
        if upstream.status_code in RETRY_STATUSES and attempt == 0 and len(candidates) > 1:
            await upstream.aclose()
            await pools.failed(redis, instance, call.request_id)
            candidates.remove(instance)
            continue
        return upstream
    return None


async def _whole(call: Call, redis, upstream: httpx.Response) -> Answer:
    try:
        content = await upstream.aread()
    except asyncio.CancelledError:
        await upstream.aclose()
        await call.end(redis, CLIENT_CLOSED, "client_closed")
        raise
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
        code = str(((reshaped or orjson.loads(content)).get("error") or {}).get("code") or status)
        await call.end(redis, status, code[:64])
        return Answer(status, content)
    await call.end(redis, status, "", relay.usage_of(content))
    return Answer(status, content, upstream.headers.get("content-type", "application/json").encode())


class Relay:
    """A stream's answer: the engine's chunks as they come, then its usage record, exactly once, however
    it ends (the last chunk, a broken engine, a client that left, or a client never read from at all)."""

    def __init__(self, call: Call, redis, upstream: httpx.Response, watch: relay.StreamWatch):
        self.call = call
        self.redis = redis
        self.upstream = upstream
        self.watch = watch
        self.ended = False

    def __aiter__(self):
        return self._chunks()

    async def _chunks(self):
        status, code = 200, ""
        renewed = time.monotonic()
        call, watch = self.call, self.watch
        try:
            # The response's own byte stream rather than aiter_raw(): the chunks pass unchanged either way,
            # and this is one layer less per chunk (panel.gateway.transport).
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
        except httpx.HTTPError:
            # Bytes already went out, so it cannot be retried: the stream ends with an error event, which
            # the OpenAI SDKs raise, instead of stopping short without [DONE] as if it had finished.
            status, code = 502, "upstream_broken"
            yield BROKEN_STREAM_EVENT
        except asyncio.CancelledError:
            status, code = CLIENT_CLOSED, "client_closed"
            raise
        finally:
            await self._end(status, code)

    async def _end(self, status: int, code: str) -> None:
        if self.ended:
            return
        self.ended = True
        await self.upstream.aclose()  # the engine sees the connection go and stops generating
        await self.call.end(self.redis, status, code, self.watch.usage, self.watch.ttft_ms)

    async def aclose(self) -> None:
        """For an answer whose stream was never read (its client left first)."""
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
