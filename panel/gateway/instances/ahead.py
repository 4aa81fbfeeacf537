"""Picking a request's instance in the round trip that reads its key and pool (docs/serving-plane.md §4).

A request waited for two Redis round trips before it went to an engine: one read its key, its pool and the
excluded instances (panel.gateway.access.identity), the next picked the instance and counted the request
against it (panel.gateway.instances.pool). The pick needs the pool, but the pool of a served name changes
rarely, so each web process remembers the last one it read (`remember`) and sends the pick with the read,
in the same pipeline (`plan`). Once the read is back, the pick stands when the request is served and the
pool it was made from is the one just read (the same instances, none newly excluded, the same policy:
`stands`); otherwise it is taken back (`take_back`) before the request picks as before, or ends. So a
steady request waits for one round trip; one whose pool just changed, or that is refused, for one more
than before (the take-back), and none is ever sent by a pool it would not have been sent by.

Only pools routed by least outstanding requests are picked ahead: a prefix or session pick records its
holders as it picks (panel.gateway.instances.routing), which a pick taken back could not undo; nor a pool
whose engines can sleep (panel.gateway.instances.wake may hold the request and change its instances).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass

from panel.gateway.instances import failover, routing
from panel.gateway.instances import pool as pools

log = logging.getLogger(__name__)

PREFILL, DECODE = "prefill", "decode"  # as panel.gateway.proxy.pd names the roles

# Served name -> (its pool, the excluded instances) as this process last read them. Bounded by the served
# names deployed: a name no deployment serves has no pool and is not kept.
_seen: dict[str, tuple[pools.Pool, dict]] = {}
# Picks taken back while their request goes on (held here: the event loop keeps tasks only weakly).
_taking_back: set[asyncio.Future] = set()


@dataclass(frozen=True)
class Ahead:
    """Picks sent with a request's key and pool read: among `candidates` (the remembered pool's usable
    instances), one per `picks` (plain: the instance; disaggregated: the prefill, then the decode)."""

    pool: pools.Pool
    candidates: tuple[pools.Instance, ...]
    picks: tuple[pools.Pick, ...]

    def commands(self) -> list[tuple]:
        return [pick.command() for pick in self.picks]

    def chosen(self, indexes: tuple) -> tuple[pools.Instance, ...]:
        return tuple(pick.instances[int(index)] for pick, index in zip(self.picks, indexes, strict=True))


def remember(served_name: str, pool: pools.Pool | None, excluded: dict) -> None:
    if pool is None:
        _seen.pop(served_name, None)
    else:
        _seen[served_name] = (pool, excluded)


def forget() -> None:
    """Drop what this process remembers (tests start each from a known pool)."""
    _seen.clear()


def plan(served_name: str | None, request_id: str, prefill_id: Callable[[], str]) -> Ahead | None:
    """The picks to send with the read of `served_name`'s key and pool, or None (nothing remembered, a
    routed or sleeping pool). `prefill_id`: what a disaggregated request's prefill is counted as
    (panel.gateway.proxy.pd.prefill_id of its first attempt), asked only for a disaggregated pool."""
    if served_name is None or served_name not in _seen:
        return None
    pool, excluded = _seen[served_name]
    if pool.routing != routing.LEAST_OUTSTANDING or pool.idle:
        return None
    candidates = failover.usable(list(pool.instances), excluded)
    if not candidates:
        return None
    picks: tuple[pools.Pick, ...] = (pools.Pick(candidates, request_id),)
    if any(instance.role in (PREFILL, DECODE) for instance in candidates):
        prefills = [i for i in candidates if i.role == PREFILL]
        decodes = [i for i in candidates if i.role == DECODE]
        if not prefills or not decodes:
            return None
        picks = (pools.Pick(prefills, prefill_id(), weighed=True), pools.Pick(decodes, request_id))
    return Ahead(pool, tuple(candidates), picks)


def stands(ahead: Ahead, pool: pools.Pool, candidates: list[pools.Instance]) -> bool:
    """Whether the picks made ahead are the ones the request would have made: the pool just read is the one
    they were made from, and so are its usable instances (the excluded ones just read left out)."""
    return ahead.pool == pool and ahead.candidates == tuple(candidates)


class Pending:
    """A request's picks made ahead until it claims them (`claim`) or ends without them (`drop`)."""

    def __init__(self, redis, ahead: Ahead | None, indexes: tuple | None):
        self.redis, self.ahead, self.indexes = redis, ahead, indexes

    async def claim(
        self, pool: pools.Pool, candidates: list[pools.Instance]
    ) -> tuple[pools.Instance, ...] | None:
        """The instances picked ahead when they `stand` for `pool` and its usable `candidates`, else None:
        the picks are taken back before the request picks again, as it counts under the same ids (a take-back
        landing after the new pick would stop counting it)."""
        ahead, self.ahead = self.ahead, None
        if ahead is None:
            return None
        if stands(ahead, pool, candidates):
            return ahead.chosen(self.indexes or ())
        await asyncio.shield(take_back(self.redis, ahead, self.indexes))  # done even if the client leaves
        return None

    async def drop(self) -> None:
        """The request ended without its picks (refused, or its client left): they are taken back before
        its answer is complete, so no count of it outlives the request."""
        ahead, self.ahead = self.ahead, None
        if ahead is not None:
            await asyncio.shield(take_back(self.redis, ahead, self.indexes))


def take_back(redis, ahead: Ahead, indexes: tuple | None) -> asyncio.Future:
    """Stop counting the picks made ahead; the future is done when they are. `indexes`: what the picks
    chose, or None when their answer never came (the read was cancelled): then the request's ids are taken
    off every candidate. Should it fail, the counts expire with the in-flight
    TTL as a dead process's do."""
    task = asyncio.ensure_future(_release(redis, _counted(ahead, indexes)))
    _taking_back.add(task)
    task.add_done_callback(_taking_back.discard)
    return task


def _counted(ahead: Ahead, indexes: tuple | None) -> list[tuple[pools.Instance, str]]:
    if indexes is None:
        return [(instance, pick.request_id) for pick in ahead.picks for instance in pick.instances]
    return [
        (instance, pick.request_id) for pick, instance in zip(ahead.picks, ahead.chosen(indexes), strict=True)
    ]


async def _release(redis, counted: list[tuple[pools.Instance, str]]) -> None:
    try:
        async with redis.pipeline(transaction=False) as pipeline:
            for instance, request_id in counted:
                pools.release(pipeline, instance, request_id)
            await pipeline.execute()
    except Exception:  # the request goes on; a count left behind only weighs its instance until its TTL
        log.exception("could not take back the picks of %s", counted[0][1] if counted else "a request")
