"""`Last-Event-ID` for `?watch=true`: a client that reconnects gets what changed while it was away, not every
object again.

Every event of a watch carries `id: <stream>-<n>`. What the stream sent is kept in the panel's Redis, by
object: the number of the event that last carried it and a digest of what it said (empty for `deleted`),
for PANEL_WATCH_RESUME_S after its last write. A client that comes back with `Last-Event-ID: <stream>-<n>`
holds, for each object, what the ledger says when that was sent by event n or earlier; anything sent after n
may not have reached it and is sent again (the object as it is now, or its deletion). An id the ledger does
not know (expired, from another panel, made up) starts the stream afresh, as without the header.

The ledger only decides what need not be sent again: every object still comes from the database, narrowed
to the viewer, and the ledger belongs to one viewer and one watched path with its filters, so an id cannot
be used to learn another user's object names through `deleted` events.
"""

import contextlib
import hashlib
import json
import uuid

import redis
from django.conf import settings
from redis.typing import EncodableT, FieldT

from panel.core.infra import panel_redis

PREFIX = "panel:watch:"
OWNER = "\x00owner"  # a field no object key can be
UNKNOWN = "?"  # what the client holds of an object is not known: send it again, or its deletion


def digest(data: dict) -> str:
    text = json.dumps(data, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.blake2b(text.encode(), digest_size=12).hexdigest()


def owner_of(request) -> str:
    """The viewer and what they watch: the path and its filters (`watch` aside)."""
    query = sorted(
        (name, value) for name, values in request.GET.lists() for value in values if name != "watch"
    )
    who = json.dumps([str(request.user.pk), request.path, query])
    return hashlib.blake2b(who.encode(), digest_size=16).hexdigest()


class Ledger:
    """What one stream sent. `held()` (once, at the start) reads what a resuming client holds; `event_id()`
    numbers each event; `record()` writes a batch of sent events. Blocking: call them on a thread."""

    def __init__(self, owner: str, last_event_id: str | None):
        self.owner = owner
        self.last_event_id = (last_event_id or "").strip()
        self.stream = uuid.uuid4().hex
        self.seq = 0

    @property
    def key(self) -> str:
        return PREFIX + self.stream

    def held(self) -> dict[str, str]:
        """{object key: digest of what the client holds, or UNKNOWN}; {} for a fresh stream."""
        stream, _dash, number = self.last_event_id.rpartition("-")
        if not stream or not number.isdigit() or len(stream) != 32:
            return {}
        try:
            entries = panel_redis.hgetall(PREFIX + stream)
        except redis.RedisError:
            return {}
        if entries.pop(OWNER, None) != self.owner:
            return {}
        last = int(number)
        held, top = {}, 0
        for key, entry in entries.items():
            seq, _colon, sent = entry.partition(":")
            top = max(top, int(seq))
            if int(seq) > last:
                held[key] = UNKNOWN
            elif sent:
                held[key] = sent
        self.stream, self.seq = stream, top  # the same stream goes on, numbered on from what it sent
        return held

    def event_id(self) -> str:
        self.seq += 1
        return f"{self.stream}-{self.seq}"

    def record(self, sent: dict[str, tuple[int, str]]) -> None:
        """`sent`: {object key: (event number, digest, or "" for deleted)}."""
        fields: dict[FieldT, EncodableT] = {key: f"{seq}:{value}" for key, (seq, value) in sent.items()}
        fields[OWNER] = self.owner
        try:
            with panel_redis.client().pipeline() as pipe:
                pipe.hset(self.key, mapping=fields)
                pipe.expire(self.key, int(settings.PANEL_WATCH_RESUME_S))
                pipe.execute()
        except redis.RedisError:
            pass  # the stream goes on; a reconnect then starts afresh

    def touch(self) -> None:
        with contextlib.suppress(redis.RedisError):
            panel_redis.client().expire(self.key, int(settings.PANEL_WATCH_RESUME_S))
