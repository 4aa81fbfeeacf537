"""`?watch=true` on list and detail endpoints: the objects as Server-Sent Events, then each change.

    event: deployment              (WatchSpec.event)
    data: {...the object as the detail endpoint serializes it...}

    event: deleted
    data: {"name": "qwen-chat"}     (WatchSpec.key: gone, or no longer what the list shows its viewer)

    : keepalive                    (a comment every PANEL_STREAM_KEEPALIVE_S)

The DRF view decides what is watched (queryset narrowed to what the user may see, the list's filters, the
detail's 404) and hands a `Watch` out as a `WatchResponse`; panel/core/rest/streams.py turns that into the
stream. The stream subscribes to the channel-layer group first, then reads the objects, then reads one
object again for every broadcast about it; every PANEL_WATCH_RESYNC_S it reads them all again (a lost
broadcast costs a delay, never a missed state) and checks that the viewer's credential still signs in.
Every event has an `id:`; a client reconnecting with `Last-Event-ID` gets only what changed since
(panel/core/rest/watch_resume.py).
"""

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.http import StreamingHttpResponse
from django.utils import translation
from rest_framework.renderers import JSONRenderer
from rest_framework.response import Response

from panel.core.rest.watch_resume import Ledger, digest, owner_of
from panel.core.web.request_threads import on_shared_threads, release_request_thread
from panel.realtime.auth import request_credential_holds
from panel.realtime.listen import Inbox

RETRY_MS = 3000  # what EventSource clients wait before they reconnect


@dataclass(frozen=True)
class WatchSpec:
    event: str  # the SSE event name of one object: "deployment", "operation"
    key: str  # the field naming an object in broadcasts and in `deleted`: "name", "id"
    list_group: str  # the channel-layer group with every object's changes
    detail_group: Callable[[Any], str]  # an object -> the group with its changes
    change_type: str  # the broadcasts that say an object changed: "deployment.status", "operation.status"
    change_field: str  # which field of such a broadcast holds the object's key: "name", "operation"
    volatile: tuple[str, ...] = ()  # fields whose change alone is not worth an event (live metrics)

    def change_key(self, message: dict) -> str | None:
        """The key of the object a broadcast says changed; None for other broadcasts (logs, metrics)."""
        if message.get("type") != self.change_type or message.get(self.change_field) is None:
            return None
        return str(message[self.change_field])


class Watch:
    """What one `?watch=true` request follows, prepared by its DRF view."""

    def __init__(self, spec: WatchSpec, *, queryset, serialize, group: str, single: bool, request):
        self.spec = spec
        self.queryset = queryset
        self.serialize = serialize
        self.group = group
        self.single = single  # a detail watch: ends once its object is gone
        self.request = request
        self.language = translation.get_language()
        self.ledger = Ledger(owner_of(request), request.headers.get("Last-Event-ID"))

    def read_all(self) -> dict[str, dict]:
        with translation.override(self.language):
            # .all(): a clone read anew. Iterating the stored queryset itself filled its result cache at the
            # stream's start, and every resync sent that first reading again (a finished rollout shown as its
            # first step, then nothing new).
            rows = self.queryset.all()
            return {str(getattr(row, self.spec.key)): self.serialize(row) for row in rows}

    def read_one(self, key: str) -> dict | None:
        with translation.override(self.language):
            row = self.queryset.filter(**{self.spec.key: key}).first()
            return None if row is None else self.serialize(row)

    def still_signed_in(self) -> bool:
        return request_credential_holds(self.request)

    def compared(self, data: dict) -> dict:
        return {field: value for field, value in data.items() if field not in self.spec.volatile}


class WatchResponse(Response):
    """What a watching DRF action returns; the async view answers with `streaming()` instead."""

    def __init__(self, watch: Watch):
        super().__init__(status=200)
        self.watch = watch

    def streaming(self) -> StreamingHttpResponse:
        response = StreamingHttpResponse(events(self.watch), content_type="text/event-stream")
        response["Cache-Control"] = "no-cache"
        response["X-Accel-Buffering"] = "no"  # nginx: pass each event on at once
        return response


def event_text(name: str, data: dict, event_id: str | None = None) -> bytes:
    # DRF's JSON, as the API answers; it escapes newlines, so one `data:` line holds the whole object.
    head = b"" if event_id is None else b"id: " + event_id.encode() + b"\n"
    return head + b"event: " + name.encode() + b"\ndata: " + JSONRenderer().render(data) + b"\n\n"


def in_list_order(current: dict[str, dict], sent: dict[str, str]) -> dict[str, dict | None]:
    """Every object now listed, in the list's own order (as a plain GET pages it), then those the client
    holds that went (None): a set of both keys sent them in hash order, a different one each process."""
    gone: dict[str, dict | None] = {key: None for key in sent if key not in current}
    return {**current, **gone}


async def events(watch: Watch):
    """The stream's bytes. Runs after Django's response middleware, so the request's thread can go."""
    spec, ledger = watch.spec, watch.ledger
    await release_request_thread()
    async with Inbox([watch.group]) as inbox:
        yield f"retry: {RETRY_MS}\n\n".encode()
        # key -> digest of what the client holds: nothing on a fresh stream, the ledger's on a resumed one
        sent: dict[str, str] = await on_shared_threads(ledger.held)
        current = await on_shared_threads(watch.read_all)
        changes = in_list_order(current, sent)
        now = time.monotonic()
        keepalive_at = now + settings.PANEL_STREAM_KEEPALIVE_S
        resync_at = now + settings.PANEL_WATCH_RESYNC_S
        while True:
            recorded: dict[str, tuple[int, str]] = {}
            for key, data in changes.items():
                if data is None:
                    if sent.pop(key, None) is not None:
                        event_id = ledger.event_id()
                        recorded[key] = (ledger.seq, "")
                        yield event_text("deleted", {spec.key: key}, event_id)
                elif (seen := digest(watch.compared(data))) != sent.get(key):
                    sent[key] = seen
                    event_id = ledger.event_id()
                    recorded[key] = (ledger.seq, seen)
                    yield event_text(spec.event, data, event_id)
            if recorded:
                await on_shared_threads(ledger.record, recorded)
            if watch.single and not sent:
                return  # the object is gone (or was never there to begin with)
            now = time.monotonic()
            if now >= keepalive_at:
                keepalive_at = now + settings.PANEL_STREAM_KEEPALIVE_S
                await on_shared_threads(ledger.touch)
                yield b": keepalive\n\n"
            if now >= resync_at:
                resync_at = now + settings.PANEL_WATCH_RESYNC_S
                if not await on_shared_threads(watch.still_signed_in):
                    return
                current = await on_shared_threads(watch.read_all)
                changes = in_list_order(current, sent)
                continue
            message = await inbox.next(
                min(keepalive_at, resync_at) - now, lambda message: spec.change_key(message) is not None
            )
            changes = {}
            changed = spec.change_key(message) if message is not None else None
            if changed is not None:
                changes[changed] = await on_shared_threads(watch.read_one, changed)
