"""Which engines sleep, and when each last had a request: Redis keys the leader and the gateway share
(docs/serving-plane.md §4, instance state `asleep`).

  sleep:asleep:<deployment id>     the engine sleeps (value: its level); set by whoever put it to sleep once
                                   vLLM said so, removed once /is_sleeping says it is awake again
  sleep:last:<deployment id>       when the gateway last routed a request for it (epoch seconds)
  sleep:waking:<deployment id>     held while one wake runs (value: the waker's token): concurrent first
                                   requests, in any web process, wait for that wake instead of starting theirs
  sleep:wake-failed:<deployment id>  for a few seconds after a wake failed: its error, so the requests that
                                   waited for it answer it too (NO_ROOM_MARK first when it had no
                                   room to wake: it stays asleep and is not restarted)

The gateway (a layer above) reads and writes these names with its own asynchronous client; the keys are the
deployments' because the leader's idle step and the page read them too. A stale `asleep` can only cost a
/wake_up call that finds the engine awake.
"""

from __future__ import annotations

import time
import uuid

from panel.core.infra.panel_redis import client

PREFIX = "sleep:"
WAKE_FAILED_TTL_S = 10
# Starts a wake-failed value when the engine had no room to wake (left asleep, not restarted).
NO_ROOM_MARK = "no-room: "
LAST_TTL_S = 30 * 24 * 3600
# Release the waking lock only while it is still the caller's (the panel's release and the gateway's).
RELEASE = """
if redis.call('get', KEYS[1]) == ARGV[1] then
  return redis.call('del', KEYS[1])
end
return 0
"""


def asleep_key(deployment_id: int) -> str:
    return f"{PREFIX}asleep:{deployment_id}"


def last_key(deployment_id: int) -> str:
    return f"{PREFIX}last:{deployment_id}"


def waking_key(deployment_id: int) -> str:
    return f"{PREFIX}waking:{deployment_id}"


def wake_failed_key(deployment_id: int) -> str:
    return f"{PREFIX}wake-failed:{deployment_id}"


def mark_asleep(deployment_id: int, level: int) -> None:
    client().set(asleep_key(deployment_id), str(level))


def mark_awake(deployment_id: int) -> None:
    client().delete(asleep_key(deployment_id))


def asleep_level(deployment_id: int) -> int | None:
    """The level the engine sleeps at, or None: awake (as far as the panel put it to sleep)."""
    found = client().get(asleep_key(deployment_id))
    return int(found) if found else None


def touch(deployment_id: int, now: float | None = None) -> None:
    """A request was routed to it now (the gateway's asynchronous twin is in
    panel/gateway/instances/wake.py)."""
    client().set(last_key(deployment_id), repr(now if now is not None else time.time()), ex=LAST_TTL_S)


def last_request(deployment_id: int) -> float | None:
    found = client().get(last_key(deployment_id))
    try:
        return float(found) if found else None
    except ValueError:
        return None


def forget(deployment_id: int) -> None:
    """A (re)started engine is awake and has served nothing yet."""
    client().delete(asleep_key(deployment_id), wake_failed_key(deployment_id))


def can_sleep(deployment) -> bool:
    """Whether its engine was started able to sleep (an `idle:` deployment, launched with sleep mode). Here,
    below the sleep actions, so the gateway's pool reads it without importing them (they reach the pool)."""
    return bool((deployment.spec or {}).get("enable_sleep_mode"))


def claim_wake(deployment_id: int, ttl_s: float) -> str | None:
    """Take the waking lock the gateway's requests wait on (one wake per engine at a time): its token, or
    None when a wake (the gateway's or another) already runs."""
    token = uuid.uuid4().hex
    return token if client().set(waking_key(deployment_id), token, nx=True, px=int(ttl_s * 1000)) else None


def release_wake(deployment_id: int, token: str) -> None:
    client().eval(RELEASE, 1, waking_key(deployment_id), token)


def waking(deployment_id: int) -> bool:
    """Whether a wake of the engine runs now (someone holds the waking lock)."""
    return bool(client().exists(waking_key(deployment_id)))


def failed_wake(deployment_id: int, why: str) -> None:
    """The requests that wait for this wake answer `why` too (they read it for a few seconds)."""
    client().set(wake_failed_key(deployment_id), why, ex=WAKE_FAILED_TTL_S)
