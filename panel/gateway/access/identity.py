"""Who is calling the gateway (an API token with the inference scope, of an active user with a role) and
which pool serves the model it names.

Both answers come from the database and are kept in Redis for a few seconds (`resolve_cached`),
so a request in the steady state reads one Redis round trip and never leaves the event loop. Whatever
changes an answer drops it at once (panel.gateway.signals): a token saved (revoked), a user saved
(deactivated) or regrouped, a deployment saved (a probe failed, a state changed) or deleted. The TTLs only
bound what a change made behind the ORM's back (a queryset update) could leave stale.

Redis is trusted no further than the panel's own seal (panel.gateway.sealing): an entry there that the
panel did not write, or that outlived its TTL, is refused and the database answers.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, replace
from typing import Any, cast

from asgiref.sync import sync_to_async
from django.db import close_old_connections
from django.utils.translation import gettext as _

from panel.accounts.models import SCOPE_INFERENCE, ApiToken, hash_token
from panel.accounts.roles import role_of
from panel.gateway import sealing, store
from panel.gateway.instances import pool as pools

log = logging.getLogger(__name__)

CALLER_TTL_S = 30
POOL_TTL_S = 5
# An entry read with less than this share of its TTL left is read again from the database in the background
# while the request goes on with it: a steady caller never waits for the database (it did once per pool TTL,
# tens of ms on a loaded machine), and no entry is older than its TTL allows.
REFRESH_AHEAD_SHARE = 0.4


@dataclass(frozen=True)
class Caller:
    token_id: int
    key: str  # "<owner>/<token name>": how usage rows and metrics name the key
    user_id: int
    allowed_models: tuple[str, ...]
    requests_per_minute: int | None
    tokens_per_minute: int | None

    def allows(self, served_name: str) -> bool:
        return not self.allowed_models or served_name in self.allowed_models

    def as_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> Caller:
        return cls(**{**data, "allowed_models": tuple(data["allowed_models"])})

    @classmethod
    def of(cls, token: ApiToken) -> Caller:
        return cls(
            token_id=token.pk,
            key=token.label,
            user_id=token.user_id,
            allowed_models=tuple(token.allowed_models or ()),
            requests_per_minute=token.requests_per_minute,
            tokens_per_minute=token.tokens_per_minute,
        )


@dataclass(frozen=True)
class Refusal:
    status: int
    message: str
    kind: str
    code: str


@dataclass(frozen=True)
class Resolved:
    caller: Caller | None = None
    pool: pools.Pool | None = None
    refusal: Refusal | None = None
    held: Any = None  # what `resolve_cached`'s guard answered when it kept the key from the database
    also: tuple = ()  # the raw values of `resolve_cached`'s `also` keys, read in the same round trip
    picked: tuple = ()  # what `resolve_cached`'s `ahead` commands answered, in the same round trip


def unknown_key() -> Refusal:
    return Refusal(401, _("Invalid, expired or revoked API key."), "invalid_request_error", "invalid_api_key")


def _caller_from_db(key_hash: str):
    """(caller, refusal, expiry as epoch or None); no caller when the key is not a usable one."""
    token = ApiToken.objects.usable().select_related("user").filter(key_hash=key_hash).first()
    if token is None or not token.user.is_active:
        return None, unknown_key(), None
    expires = token.expires.timestamp() if token.expires else None
    return (*_checked(token), expires)


def refused_key(code: str) -> Refusal:
    """A known key that may not call the gateway; built per request, so its message is in its language."""
    if code == "insufficient_scope":
        message = _("This API key has no inference scope; create one with it to call /v1.")
    else:
        message = _("The key's owner has no role in the panel.")
    return Refusal(403, message, "permission_error", code)


def _checked(token: ApiToken) -> tuple[Caller, Refusal | None]:
    caller = Caller.of(token)
    if not token.covers(SCOPE_INFERENCE):
        return caller, refused_key("insufficient_scope")
    if role_of(token.user) is None:
        return caller, refused_key("no_role")
    return caller, None


def _decide(caller: Caller, served_name: str, found: pools.Pool | None) -> Resolved:
    if not caller.allows(served_name):
        return Resolved(
            caller=caller,
            refusal=Refusal(
                403,
                _("This API key may not use the model `{model}`.").format(model=served_name),
                "permission_error",
                "model_not_allowed",
            ),
        )
    if found is None:
        return Resolved(
            caller=caller,
            refusal=Refusal(
                404,
                _("The model `{model}` does not exist.").format(model=served_name),
                "invalid_request_error",
                "model_not_found",
            ),
        )
    return Resolved(caller=caller, pool=found)


def caller_key(key_hash: str) -> str:
    return f"{store.PREFIX}caller:{key_hash}"


def pool_key(served_name: str) -> str:
    return f"{store.PREFIX}pool:{served_name}"


def _load(key_hash: str, served_name: str | None, need_caller: bool, need_pool: bool) -> dict:
    """What the cache lacked, from the database: the entries to cache (JSON-ready) and their TTLs. Runs in
    a pool thread outside any request cycle, so it closes its connection as a request would."""
    close_old_connections()
    try:
        return _read(key_hash, served_name, need_caller, need_pool)
    finally:
        close_old_connections()


def _read(key_hash: str, served_name: str | None, need_caller: bool, need_pool: bool) -> dict:
    found: dict[str, tuple[dict | None, int]] = {}
    if need_caller:
        caller, refusal, expires = _caller_from_db(key_hash)
        if caller is not None:
            ttl = CALLER_TTL_S if expires is None else min(CALLER_TTL_S, int(expires - time.time()))
            entry = {"caller": caller.as_dict(), "refusal": refusal.code if refusal else None}
            found["caller"] = (entry, ttl)
        else:
            found["caller"] = (None, 0)
    if need_pool and served_name is not None:
        pool = pools.pool_for(served_name)
        found["pool"] = ({"pool": pool.as_dict() if pool else None}, POOL_TTL_S)
    return found


async def resolve_cached(
    raw: str,
    served_name: str | None,
    guard: Callable[[], Awaitable[Any]] | None = None,
    also: tuple[str, ...] = (),
    ahead: list[tuple] | None = None,
) -> Resolved:
    """The caller and, when `served_name` is given, the pool it may use, or why not: from Redis when it
    can be, else from the database (and then kept in Redis). A key the cache does not know is looked up only
    if `guard()` answers None; else the answer is `Resolved(held=<what it answered>)`. Keys that called
    recently never reach the guard, so it costs the steady state nothing. The `also` keys are read in the
    same round trip and handed back raw with a resolved pool (a request's next read, one trip fewer); the
    `ahead` scripts (EVAL arguments, panel.gateway.instances.ahead) run in it too, their answers in
    `picked` whatever the answer (a caller that does not use them takes them back)."""
    redis = store.aclient()
    key_hash = hash_token(raw)
    keys = [caller_key(key_hash)] + ([pool_key(served_name)] if served_name else [])
    async with redis.pipeline(transaction=False) as pipeline:
        pipeline.mget(keys + list(also))
        for key in keys:
            pipeline.pttl(key)
        for command in ahead or ():
            pipeline.eval(*command)
        fetched, *answers = await pipeline.execute()
    left_ms, picked = answers[: len(keys)], tuple(answers[len(keys) :])
    return replace(
        await _resolved(redis, key_hash, served_name, keys, fetched, left_ms, guard), picked=picked
    )


async def _resolved(redis, key_hash: str, served_name, keys: list[str], fetched, left_ms, guard) -> Resolved:
    """`resolve_cached`'s answer from what its round trip read."""
    fetched = cast("list[str | None]", fetched)  # decode_responses: str, not bytes
    cached, extra = fetched[: len(keys)], tuple(fetched[len(keys) :])
    caller_entry = await _opened(redis, keys[0], cached[0], "gateway-caller")
    pool_entry = await _opened(redis, keys[1], cached[1], "gateway-pool") if served_name else None
    if caller_entry is not None and (not served_name or pool_entry is not None):
        _refresh_if_old(key_hash, served_name, keys, left_ms, redis)
    if caller_entry is None and guard is not None:
        held = await guard()
        if held is not None:
            return Resolved(held=held)
    if caller_entry is None or (served_name and pool_entry is None):
        loaded = await _single_flight(
            (key_hash, served_name, caller_entry is None, bool(served_name) and pool_entry is None),
            redis,
            keys,
        )
        caller_entry = loaded["caller"][0] if "caller" in loaded else caller_entry
        pool_entry = loaded["pool"][0] if "pool" in loaded else pool_entry
    if caller_entry is None:
        return Resolved(refusal=unknown_key())
    caller = Caller.from_dict(caller_entry["caller"])
    if caller_entry["refusal"] is not None or served_name is None:
        refusal = refused_key(caller_entry["refusal"]) if caller_entry["refusal"] else None
        return Resolved(caller=caller, refusal=refusal)
    pool_data = (pool_entry or {}).get("pool")
    pool = pools.Pool.from_dict(pool_data) if pool_data else None
    return replace(_decide(caller, served_name, pool), also=extra)


async def _opened(redis, key: str, stored: str | None, kind: str) -> dict | None:
    """The entry the panel wrote under `key`, or None (a miss: the database answers) when there is none or
    someone else wrote it (refused and counted, panel.gateway.sealing)."""
    if stored is None:
        return None
    try:
        return sealing.opened(key, stored)
    except (sealing.Unsealed, ValueError, KeyError) as error:
        await sealing.refused(redis, kind, str(error))
        return None


def _refresh_if_old(key_hash: str, served_name: str | None, keys: list[str], left_ms: list, redis) -> None:
    """Read the entries again in the background when they have little of their TTL left."""
    caller_old = 0 <= left_ms[0] < CALLER_TTL_S * 1000 * REFRESH_AHEAD_SHARE
    pool_old = bool(served_name) and 0 <= left_ms[-1] < POOL_TTL_S * 1000 * REFRESH_AHEAD_SHARE
    what = (key_hash, served_name, caller_old, pool_old)
    if (caller_old or pool_old) and what not in _loading:
        task = asyncio.ensure_future(_single_flight(what, redis, keys))
        _refreshing.add(task)
        task.add_done_callback(_refreshed)


_refreshing: set[asyncio.Future] = set()  # held until done: the loop keeps only weak references to tasks


def _refreshed(task: asyncio.Future) -> None:
    _refreshing.discard(task)
    if not task.cancelled() and task.exception() is not None:
        log.warning("gateway entries not refreshed: %s", task.exception())


# Requests of one process that miss the cache together share one database read (a burst after a restart,
# or after a deployment changed, would otherwise send every one of them to the database).
_loading: dict[tuple, asyncio.Future] = {}


async def _single_flight(what: tuple, redis, keys: list[str]) -> dict:
    waiting = _loading.get(what)
    if waiting is not None:
        return await asyncio.shield(waiting)
    future = asyncio.get_running_loop().create_future()
    _loading[what] = future
    try:
        loaded = await sync_to_async(_load, thread_sensitive=False)(*what)
        async with redis.pipeline(transaction=False) as pipeline:
            for name, (entry, ttl) in loaded.items():
                if entry is not None and ttl > 0:
                    key = keys[0] if name == "caller" else keys[1]
                    pipeline.set(key, sealing.seal(key, entry, ttl), ex=ttl)
            await pipeline.execute()
        future.set_result(loaded)
        return loaded
    except asyncio.CancelledError:
        future.cancel()
        raise
    except BaseException as failure:
        future.set_exception(failure)
        future.exception()  # retrieved: a failure nobody else waited for is not logged as lost
        raise
    finally:
        del _loading[what]


def _served_names() -> list[str]:
    close_old_connections()
    try:
        return pools.served_names()
    finally:
        close_old_connections()


async def served_names() -> list[str]:
    return await sync_to_async(_served_names, thread_sensitive=False)()
