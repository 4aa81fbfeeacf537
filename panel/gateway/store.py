"""The gateway's state lives in Redis (and the database), never in a web process, so any number of them
agree. Keys, all under `gw:`:

  inflight:<instance>   sorted set of the requests an engine instance is serving now (member = request id,
                        score = when it started or last said it is alive); least outstanding requests wins
  suspect:<instance>    exists for a few seconds after an instance failed a request before its first byte:
                        others avoid it until the reconcile loop's probe has had its say
  rpm:<token>:<minute>  requests of a key in one clock minute; tpm:<token>:<minute> its tokens
  caller:<key sha256>   what a key may do (panel.gateway.access.identity), for 30 s or until the key changes
  pool:<served name>    the healthy instances of a model, for 5 s or until one of its deployments changes
  usage                 list of finished requests (JSON), drained into the database by a beat task
  drain-lock            held while one drain runs
  m:requests, m:tokens, m:ttft   hashes of counters for /metrics (panel.gateway.accounting.metrics)

caller:, pool: and usage entries are sealed by the panel (panel.gateway.sealing): one that anyone else wrote
is refused.
"""

import asyncio
import weakref

import redis
import redis.asyncio
from django.conf import settings

from panel.monitoring.metrics.store import client as shared

PREFIX = "gw:"
USAGE_QUEUE = f"{PREFIX}usage"
DRAIN_LOCK = f"{PREFIX}drain-lock"
METRIC_REQUESTS = f"{PREFIX}m:requests"
METRIC_TOKENS = f"{PREFIX}m:tokens"
METRIC_TTFT = f"{PREFIX}m:ttft"
FIELD_SEPARATOR = "\x1f"  # between label values in a metrics hash field; never in a name or a key label


def inflight_key(instance: str) -> str:
    return f"{PREFIX}inflight:{instance}"


def suspect_key(instance: str) -> str:
    return f"{PREFIX}suspect:{instance}"


def picked_key(instance: str) -> str:
    return f"{PREFIX}picked:{instance}"


def requests_key(token_id: int, minute: int) -> str:
    return f"{PREFIX}rpm:{token_id}:{minute}"


def tokens_key(token_id: int, minute: int) -> str:
    return f"{PREFIX}tpm:{token_id}:{minute}"


def bad_keys_key(address: str, minute: int) -> str:
    return f"{PREFIX}badkeys:{address}:{minute}"


# Connection pools belong to one event loop; the web server runs one, tests and benches make more.
_async_clients: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict]" = weakref.WeakKeyDictionary()


def aclient() -> redis.asyncio.Redis:
    """This event loop's client (one pool per loop and REDIS_URL)."""
    loop = asyncio.get_running_loop()
    per_url = _async_clients.setdefault(loop, {})
    url = settings.REDIS_URL
    found = per_url.get(url)
    if found is None:
        found = per_url[url] = redis.asyncio.Redis.from_url(
            url, decode_responses=True, socket_connect_timeout=2, socket_timeout=5
        )
    return found


def client() -> redis.Redis:
    """The process's synchronous client (beat tasks, /metrics)."""
    return shared()
