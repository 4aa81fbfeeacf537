"""Which instance of a pool serves a request: the deployment's routing policy (docs/serving-plane.md §4).

- `least_outstanding` (the default): the instance with the fewest requests in flight
(panel.gateway.instances.pool).
- `prefix`: the prompt (chat messages rendered to one stable text, or the completion prompt) is cut into
  fixed-size chunks, each chunk's hash chained to the one before it, so a hash stands for the whole prompt up
  to the end of its chunk, as an engine's block hashes do. Per served model, Redis remembers which instance
  last served each hash (bounded in entries, each forgotten after a while). A request goes to the instance
  holding the longest prefix of its prompt: the engine most likely to find those blocks in its KV cache.
- `session`: the same instance for the same `X-Session-Id` header, else for the same API key.

Either is bounded by load: an instance is preferred only while its outstanding count is at most the least
loaded instance's plus a margin (PANEL_GATEWAY_ROUTING_MARGIN, or that share of the least load when more,
PANEL_GATEWAY_ROUTING_MARGIN_RATIO); past it, and when no instance holds anything, least outstanding picks.

`choose` is the policy, in Python; PICK_ROUTED does the same in Redis, atomically with counting the request
(racing web processes must not all pile onto one holder), and records the chosen instance for the request's
hashes. tests/unit/test_gateway_routing.py holds the one to the other.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass

import orjson
from django.conf import settings

from panel.gateway import store

LEAST_OUTSTANDING = "least_outstanding"
PREFIX = "prefix"
SESSION = "session"
POLICIES = (LEAST_OUTSTANDING, PREFIX, SESSION)
SESSION_HEADER = "x-session-id"
MAX_SESSION_ID = 256  # a longer header is not an id a client means: it gets the key's affinity instead
GENERATING = ("chat/completions", "completions")


@dataclass(frozen=True)
class Route:
    """What a request is routed by: its policy, its served model and its keys (for `prefix` the chained
    chunk hashes, shortest prefix first; for `session` one affinity key)."""

    policy: str
    served_name: str
    keys: tuple[str, ...]


def route_for(
    policy: str, served_name: str, endpoint: str, body: dict, headers: dict, caller
) -> Route | None:
    """The route of a request to a pool routed by `policy`, or None to route by least outstanding."""
    if policy == PREFIX and endpoint in GENERATING:
        text = prompt_text(endpoint, body)
        chunk, limit = settings.PANEL_GATEWAY_PREFIX_CHUNK_BYTES, settings.PANEL_GATEWAY_PREFIX_CHUNKS
        hashes = chunk_hashes(text, chunk, limit)
        return Route(PREFIX, served_name, tuple(hashes)) if hashes else None
    if policy == SESSION:
        return Route(SESSION, served_name, (session_key(headers, caller),))
    return None


def _content_text(content) -> str:
    """A message's content as text: a string, or the text (and image URLs) of its parts in order."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return ""
    pieces = []
    for part in content:
        if isinstance(part, dict):
            text = part.get("text")
            image = part.get("image_url")
            if isinstance(text, str):
                pieces.append(text)
            elif isinstance(image, dict) and isinstance(image.get("url"), str):
                pieces.append(image["url"])
    return "\n".join(pieces)


def prompt_text(endpoint: str, body: dict) -> bytes:
    """The prompt as stable bytes, so that a conversation's next turn starts with its last turn's bytes:
    each chat message is its role and content on a line of its own; a completion prompt is itself (a
    string, or token ids). Empty when the prompt is none of these."""
    if endpoint == "chat/completions":
        messages = body.get("messages")
        if not isinstance(messages, list):
            return b""
        rendered = bytearray()
        for message in messages:
            if isinstance(message, dict):
                role = message.get("role") if isinstance(message.get("role"), str) else ""
                rendered += orjson.dumps([role, _content_text(message.get("content"))]) + b"\n"
        return bytes(rendered)
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
        prompt = prompt[0]  # a batch of one
    if isinstance(prompt, str):
        return prompt.encode()
    if isinstance(prompt, list) and prompt and all(type(t) is int for t in prompt):
        return orjson.dumps(prompt)[1:-1]  # token ids, "1,2,3": a longer prompt starts with a shorter one
    return b""


def chunk_hashes(text: bytes, chunk: int, limit: int) -> list[str]:
    """The hashes of the first `limit` whole chunks of `chunk` bytes, each over its chunk and the hash before
    it: the i-th stands for text[: (i + 1) * chunk]. A partial last chunk has none (as an engine's partial
    block is not cached)."""
    hashes = []
    previous = b""
    for start in range(0, min(len(text) // chunk, limit) * chunk, chunk):
        previous = hashlib.blake2b(previous + text[start : start + chunk], digest_size=12).digest()
        hashes.append(previous.hex())
    return hashes


def session_key(headers: dict, caller) -> str:
    """The affinity key: the session the client names, else its API key."""
    session = headers.get(SESSION_HEADER, "").strip()
    named = f"s:{session}" if session and len(session) <= MAX_SESSION_ID else f"k:{caller.token_id}"
    return hashlib.blake2b(named.encode(), digest_size=12).hexdigest()


def held_lengths(holders: list[str | None], instance_ids: list[str]) -> list[int]:
    """Per instance, how many leading keys it holds: 1 + the index of the longest key whose holder it is
    (`holders[k]` is the instance that last served key k, None when none did); 0 when it holds none."""
    held = [0] * len(instance_ids)
    where = {instance_id: index for index, instance_id in enumerate(instance_ids)}
    for position, holder in enumerate(holders):
        if holder in where:
            held[where[holder]] = position + 1
    return held


def allowed_load(least: int, margin: int, ratio: float) -> int:
    """The most outstanding requests an instance may have and still be preferred over the least loaded."""
    return least + max(margin, math.floor(least * ratio))


def choose(loads: list[int], held: list[int], margin: int, ratio: float, rotation: int = 0) -> int:
    """The instance a request goes to. `loads`: outstanding requests per instance (an instance avoided after
    a failure counts as hugely loaded); `held`: how much of the request's prefix (or its session) each holds.
    The longest holder within the load bound wins (ties: the less loaded, then the first); with none, the
    least loaded (ties: the first counting from `rotation`, so ties spread)."""
    n = len(loads)
    least_index = min(((i + rotation) % n for i in range(n)), key=lambda j: loads[j])
    bound = allowed_load(loads[least_index], margin, ratio)
    best = None
    for j in range(n):
        if held[j] <= 0 or loads[j] > bound:
            continue
        if best is None or held[j] > held[best] or (held[j] == held[best] and loads[j] < loads[best]):
            best = j
    return least_index if best is None else best


def route_keys(served_name: str) -> tuple[str, str]:
    """The served model's key → instance hash and its key → last-used time sorted set."""
    return f"{store.PREFIX}route:{served_name}", f"{store.PREFIX}route-age:{served_name}"


# KEYS: the instances' in-flight sets, suspect flags and last-picked flags (as pool.PICK_LEAST_OUTSTANDING),
# then the route hash and its age set. ARGV 1-7 as pool.PICK_LEAST_OUTSTANDING's; 8 margin, 9 ratio,
# 10 how long an entry is kept, 11 how many entries at most; then each instance's id, and the request's keys.
# Each instance's held length (`held_lengths`) is read from the route hash here, in the same step as the
# pick: a read before it cost each routed request a round trip of its own, and a racing request could
# record other holders in between. Then `choose`; then the chosen instance is recorded for each key.
PICK_ROUTED = """
local n = (#KEYS - 2) / 3
local now = tonumber(ARGV[1])
local first = 12 + n
local held, where = {}, {}
for j = 1, n do
  held[j] = 0
  where[ARGV[11 + j]] = j
end
if first <= #ARGV then
  local holders = redis.call('HMGET', KEYS[3 * n + 1], unpack(ARGV, first, #ARGV))
  for k = 1, #holders do
    local j = holders[k] and where[holders[k]]
    if j then held[j] = k end
  end
end
local loads = {}
local least_index, least = 0, nil
for i = 1, n do
  local j = ((i - 1 + tonumber(ARGV[4])) % n) + 1
  redis.call('ZREMRANGEBYSCORE', KEYS[j], '-inf', ARGV[2])
  local load = redis.call('ZCARD', KEYS[j])
  if redis.call('EXISTS', KEYS[n + j]) == 1 then load = load + tonumber(ARGV[6]) end
  loads[j] = load
  if least == nil or load < least then least_index, least = j, load end
end
local bound = least + math.max(tonumber(ARGV[8]), math.floor(least * tonumber(ARGV[9])))
local best = 0
for j = 1, n do
  if held[j] > 0 and loads[j] <= bound then
    local best_held = best > 0 and held[best] or 0
    if best == 0 or held[j] > best_held or (held[j] == best_held and loads[j] < loads[best]) then best = j end
  end
end
if best == 0 then best = least_index end
redis.call('ZADD', KEYS[best], now, ARGV[3])
redis.call('EXPIRE', KEYS[best], ARGV[5])
redis.call('SET', KEYS[2 * n + best], '1', 'EX', ARGV[7])
local chosen = ARGV[11 + best]
if first <= #ARGV then
  local routes, ages = KEYS[3 * n + 1], KEYS[3 * n + 2]
  local fields, scored = {}, {}
  for k = first, #ARGV do
    fields[#fields + 1] = ARGV[k]
    fields[#fields + 1] = chosen
    scored[#scored + 1] = now
    scored[#scored + 1] = ARGV[k]
  end
  redis.call('HSET', routes, unpack(fields))
  redis.call('ZADD', ages, unpack(scored))
  local old = redis.call('ZRANGEBYSCORE', ages, '-inf', now - tonumber(ARGV[10]), 'LIMIT', 0, 512)
  if #old > 0 then
    redis.call('HDEL', routes, unpack(old))
    redis.call('ZREM', ages, unpack(old))
  end
  local extra = redis.call('ZCARD', ages) - tonumber(ARGV[11])
  if extra > 0 then
    local gone = redis.call('ZPOPMIN', ages, math.min(extra, 512))
    local names = {}
    for k = 1, #gone, 2 do names[#names + 1] = gone[k] end
    redis.call('HDEL', routes, unpack(names))
  end
  redis.call('EXPIRE', routes, ARGV[10])
  redis.call('EXPIRE', ages, ARGV[10])
end
return best - 1
"""


def pick_command(route: Route, instance_ids: list[str], keys: list[str], args: list) -> tuple:
    """The EVAL arguments of PICK_ROUTED for `route` (panel.gateway.instances.pool.Pick.command's `keys` and
    `args`, as its least-outstanding script takes them)."""
    routes, ages = route_keys(route.served_name)
    return (
        PICK_ROUTED,
        len(keys) + 2,
        *keys,
        routes,
        ages,
        *args,
        settings.PANEL_GATEWAY_ROUTING_MARGIN,
        settings.PANEL_GATEWAY_ROUTING_MARGIN_RATIO,
        int(settings.PANEL_GATEWAY_PREFIX_TTL_S),
        settings.PANEL_GATEWAY_PREFIX_ENTRIES,
        *instance_ids,
        *route.keys,
    )
