"""Per-key limits: requests and tokens per clock minute, counted in Redis so every web process agrees.

Requests are counted when they arrive; tokens when they are known (the engine's usage at the end), so a key
over its token budget is refused from its next request until the minute turns. A refusal carries
Retry-After: the seconds left in the minute. Addresses that send unknown keys are limited the same way.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from django.conf import settings
from django.utils.translation import gettext as _

from panel.gateway import store
from panel.gateway.access.identity import Caller

WINDOW_S = 60
KEY_LIFETIME_S = 2 * WINDOW_S


@dataclass(frozen=True)
class OverLimit:
    kind: str  # "requests" or "tokens", as OpenAI names the limit in its 429s
    message: str
    retry_after: int


def minute(now: float) -> int:
    return int(now // WINDOW_S)


def seconds_left(now: float) -> int:
    """Retry-After for a limit of this minute: the seconds until it turns."""
    return max(1, int(WINDOW_S - now % WINDOW_S + 0.999))


async def check(redis, caller: Caller, now: float | None = None) -> OverLimit | None:
    """Count this request against the key's minute and say whether a limit refuses it."""
    if caller.requests_per_minute is None and caller.tokens_per_minute is None:
        return None
    now = time.time() if now is None else now
    this_minute = minute(now)
    retry_after = seconds_left(now)
    async with redis.pipeline(transaction=False) as pipeline:
        pipeline.incr(store.requests_key(caller.token_id, this_minute))
        pipeline.expire(store.requests_key(caller.token_id, this_minute), KEY_LIFETIME_S)
        pipeline.get(store.tokens_key(caller.token_id, this_minute))
        requests, _expiry, tokens = await pipeline.execute()
    if caller.requests_per_minute is not None and int(requests) > caller.requests_per_minute:
        return OverLimit(
            "requests",
            _("Rate limit reached for this key: {limit} requests per minute. Retry in {seconds} s.").format(
                limit=caller.requests_per_minute, seconds=retry_after
            ),
            retry_after,
        )
    if caller.tokens_per_minute is not None and int(tokens or 0) >= caller.tokens_per_minute:
        return OverLimit(
            "tokens",
            _("Rate limit reached for this key: {limit} tokens per minute. Retry in {seconds} s.").format(
                limit=caller.tokens_per_minute, seconds=retry_after
            ),
            retry_after,
        )
    return None


async def guessing(redis, address: str, now: float | None = None) -> OverLimit | None:
    """Refuse an address that sent PANEL_GATEWAY_BAD_KEYS_PER_MINUTE unknown keys this minute, before its
    key is looked up: guessing keys costs a database read each, and a guesser must not get them for free."""
    now = time.time() if now is None else now
    failures = await redis.get(store.bad_keys_key(address, minute(now)))
    if int(failures or 0) < settings.PANEL_GATEWAY_BAD_KEYS_PER_MINUTE:
        return None
    retry_after = seconds_left(now)
    message = _("Too many requests with unknown API keys from this address. Retry in {seconds} s.")
    return OverLimit("requests", message.format(seconds=retry_after), retry_after)


async def unknown_key_sent(redis, address: str, now: float | None = None) -> None:
    key = store.bad_keys_key(address, minute(time.time() if now is None else now))
    async with redis.pipeline(transaction=False) as pipeline:
        pipeline.incr(key)
        pipeline.expire(key, KEY_LIFETIME_S)
        await pipeline.execute()


def spend(pipeline, caller: Caller, tokens: int, now: float) -> None:
    """Queue the tokens a finished request used on a pipeline (sent with its usage record)."""
    if caller.tokens_per_minute is None or tokens <= 0:
        return
    key = store.tokens_key(caller.token_id, minute(now))
    pipeline.incrby(key, tokens)
    pipeline.expire(key, KEY_LIFETIME_S)
