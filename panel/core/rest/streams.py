"""`?wait=` and `?watch=true` on viewsets: answers that wait for a state, and lists that stream changes.

A viewset opts in with `StreamsMixin` and declarations only:

    class DeploymentViewSet(StreamsMixin, ..., PanelViewSet):
        wait_actions = frozenset({"create", "start", "stop", "restart", "destroy"})
        waiter = DeploymentWaiter()     # what a target state means (panel/deployments/api/waiting.py)
        watch = WatchSpec(...)          # ?watch=true on list and retrieve (panel/core/rest/watch.py)

The DRF action runs unchanged (authentication, permissions, throttles, Idempotency-Key, its own answer);
`as_view` wraps it in an async view that, when the request asked, then waits for the state or streams the
changes without holding a thread (panel/core/web/request_threads.py): it awaits channel-layer messages of the
object's group (panel/realtime/listen.py). The query parameters are checked in `initial`, after sign-in
and permissions, so a bad value is a 400 before the action acts. `extra_query_params` lists them per
action (derived from the declarations): panel/core/rest/schema.py documents them, the strict query check
allows them, and the schema's 200/408/409 and text/event-stream answers come from `document_stream_responses`.
"""

import functools
import time
from collections.abc import Callable
from typing import Any, Protocol

from asgiref.sync import sync_to_async
from django.conf import settings
from django.core.handlers.asgi import ASGIRequest
from django.utils import translation
from django.utils.translation import gettext_lazy as _
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter
from rest_framework import serializers
from rest_framework.exceptions import NotAcceptable
from rest_framework.renderers import BaseRenderer, JSONRenderer

from panel.core.rest.watch import Watch, WatchResponse, WatchSpec
from panel.core.web.request_threads import on_shared_threads, release_request_thread
from panel.realtime.listen import Inbox

REACHED, FAILED, TIMED_OUT = "reached", "failed", "timed_out"
MAX_TIMEOUT_S = 3600
DEFAULT_TIMEOUT_S = 300
WATCH_ACTIONS = ("list", "retrieve")
# Where `initial` leaves the checked wait for the async view (on Django's request, which both see).
WAIT_ATTRIBUTE = "panel_wait"


class WaitQuerySerializer(serializers.Serializer):
    wait = serializers.ChoiceField(choices=[], help_text="The state to wait for.")
    timeout = serializers.FloatField(
        required=False,
        default=DEFAULT_TIMEOUT_S,
        min_value=0,
        max_value=MAX_TIMEOUT_S,
        help_text=f"Seconds to wait at most (default {DEFAULT_TIMEOUT_S}, at most {MAX_TIMEOUT_S}).",
    )

    def __init__(self, *args, targets=(), **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["wait"].choices = list(targets)

    def to_internal_value(self, data):
        if "wait" not in data:
            raise serializers.ValidationError({"timeout": [_("timeout goes with wait; add wait=<state>.")]})
        return super().to_internal_value(data)


class WatchQuerySerializer(serializers.Serializer):
    watch = serializers.BooleanField(help_text="true: answer with a stream of Server-Sent Events.")


class EventStreamRenderer(BaseRenderer):
    """Lets `Accept: text/event-stream` through content negotiation on a watchable action (DRF answered it
    406). The stream itself is written by panel/core/rest/watch.py; this renders only the empty
    placeholder."""

    media_type = "text/event-stream"
    format = "event-stream"
    charset = "utf-8"

    def render(self, data, accepted_media_type=None, renderer_context=None):
        return b""


class Waiter(Protocol):
    """What `?wait=` asks of a viewset's waiter (panel/deployments/api/waiting.py has one)."""

    @property
    def failed_serializer(self) -> type: ...
    @property
    def timed_out_serializer(self) -> type: ...

    def targets_for(self, action: str) -> tuple[str, ...]: ...
    def subject(self, data) -> Any: ...
    def group(self, subject) -> str: ...
    def is_change(self, subject) -> Any: ...
    def check(self, subject, target: str, user) -> tuple[str | None, Any]: ...
    def answer(self, data, target: str, timeout: float, result: str, state) -> tuple[int, dict]: ...


class StreamsMixin:
    """Put first in the bases. See the module docstring."""

    wait_actions: frozenset[str] = frozenset()
    waiter: Waiter | None = None
    watch: WatchSpec | None = None
    # action -> {name: OpenApiParameter or a description}: the query parameters an action reads beyond
    # what DRF documents itself; the schema lists them (panel/core/rest/schema.py), the strict check allows
    # them.
    extra_query_params: dict[str, dict] = {}
    # The viewset's own (DRF's GenericAPIView), which this mixin comes before.
    request: Any
    get_serializer: Callable[..., Any]

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        extra = {action: dict(names) for action, names in cls.extra_query_params.items()}
        for action in cls.wait_actions:
            extra.setdefault(action, {}).update(wait_parameters(cls.waiter.targets_for(action)))
        if cls.watch is not None:
            for action in WATCH_ACTIONS:
                extra.setdefault(action, {})["watch"] = WATCH_PARAMETER
        cls.extra_query_params = extra

    @classmethod
    def streams(cls, action: str | None) -> bool:
        return action in cls.wait_actions or (cls.watch is not None and action in WATCH_ACTIONS)

    @classmethod
    def as_view(cls, actions=None, **initkwargs):
        view = super().as_view(actions, **initkwargs)
        if not any(cls.streams(action) for action in (actions or {}).values()):
            return view

        async def streaming_view(request, *args, **kwargs):
            # What Django itself does with a sync view under ASGI, then the waiting or streaming part.
            response = await sync_to_async(view)(request, *args, **kwargs)
            if isinstance(response, WatchResponse):
                return response.streaming()
            wait = getattr(request, WAIT_ATTRIBUTE, None)
            if wait is not None and 200 <= response.status_code < 300:
                return await wait_then_answer(cls.waiter, request, response, wait["wait"], wait["timeout"])
            return response

        # cls, actions, initkwargs and csrf_exempt: what the router, Django's CSRF check and drf-spectacular
        # read from a viewset's view.
        return functools.update_wrapper(streaming_view, view)

    def get_renderers(self):
        renderers = super().get_renderers()
        if self.watch is not None and getattr(self, "action", None) in WATCH_ACTIONS:
            renderers.append(EventStreamRenderer())
        return renderers

    def initial(self, request, *args, **kwargs):
        super().initial(request, *args, **kwargs)
        self.watching = False
        params = request.query_params
        if self.action in self.wait_actions and ("wait" in params or "timeout" in params):
            query = WaitQuerySerializer(data=params, targets=self.waiter.targets_for(self.action))
            query.is_valid(raise_exception=True)
            setattr(request._request, WAIT_ATTRIBUTE, query.validated_data)
        elif self.watch is not None and self.action in WATCH_ACTIONS and "watch" in params:
            query = WatchQuerySerializer(data=params)
            query.is_valid(raise_exception=True)
            self.watching = query.validated_data["watch"] and request.method == "GET"
            if self.watching and not isinstance(request._request, ASGIRequest):
                # Under WSGI a stream would hold a worker for as long as the client listens.
                raise serializers.ValidationError({"watch": [_("Watching needs the panel's ASGI server.")]})
        if isinstance(request.accepted_renderer, EventStreamRenderer) and not self.watching:
            raise NotAcceptable(_("An event stream is the answer to ?watch=true; add it, or accept JSON."))

    def list(self, request, *args, **kwargs):
        if not self.watching:
            return super().list(request, *args, **kwargs)
        return WatchResponse(self._watch(self.filter_queryset(self.get_queryset()), self.watch.list_group))

    def retrieve(self, request, *args, **kwargs):
        if not self.watching:
            return super().retrieve(request, *args, **kwargs)
        found = self.get_object()  # 404 and object permissions as for a plain GET
        queryset = self.filter_queryset(self.get_queryset()).filter(pk=found.pk)
        return WatchResponse(self._watch(queryset, self.watch.detail_group(found), single=True))

    def _watch(self, queryset, group: str, single: bool = False) -> Watch:
        assert self.watch is not None, "only a viewset with a WatchSpec streams"
        return Watch(
            self.watch,
            queryset=queryset,
            serialize=lambda row: self.get_serializer(row).data,
            group=group,
            single=single,
            request=self.request,
        )


async def wait_then_answer(waiter, request, response, target: str, timeout: float):
    """Wait until the action's object reaches `target`, fails, or `timeout` passes; then answer 200 (its
    usual answer, the object read again), 409 or 408 (the waiter's bodies). Subscribed before each read of
    the database, so a change committed after the read wakes it; it reads again every
    PANEL_WAIT_RECHECK_S as well, since broadcasts are lossy."""
    subject = waiter.subject(response.data)
    if subject is None:  # nothing to wait for (a dry run)
        return response
    language, user = translation.get_language(), request.user
    await release_request_thread()
    deadline = time.monotonic() + timeout
    changed = waiter.is_change(subject)
    async with Inbox([waiter.group(subject)]) as inbox:
        while True:
            outcome, state = await on_shared_threads(waiter.check, subject, target, user)
            remaining = deadline - time.monotonic()
            if outcome is None and remaining <= 0:
                outcome = TIMED_OUT
            if outcome is not None:
                break
            await inbox.next(min(remaining, settings.PANEL_WAIT_RECHECK_S), changed)

    def answer():
        with translation.override(language):
            return waiter.answer(response.data, target, timeout, outcome, state)

    response.status_code, response.data = await on_shared_threads(answer)
    if response.status_code >= 400:  # errors are JSON whatever the client accepts, as all the API's are
        response.accepted_renderer, response.accepted_media_type = JSONRenderer(), "application/json"
    return response


def wait_parameters(targets) -> dict[str, OpenApiParameter]:
    return {
        "wait": OpenApiParameter(
            "wait",
            OpenApiTypes.STR,
            enum=list(targets),
            description="Answer once the deployment reached this state (200), failed on the way (409) or "
            "`timeout` passed (408). See docs/api-streams.md.",
        ),
        "timeout": OpenApiParameter(
            "timeout",
            {"type": "number", "minimum": 0, "maximum": MAX_TIMEOUT_S, "default": DEFAULT_TIMEOUT_S},
            description=f"Seconds to wait, with `wait` (default {DEFAULT_TIMEOUT_S}, at most "
            f"{MAX_TIMEOUT_S}).",
        ),
    }


WATCH_PARAMETER = OpenApiParameter(
    "watch",
    OpenApiTypes.BOOL,
    description="true: a text/event-stream of the objects as they are, then of each change, until the client "
    "disconnects; a reconnect with the `Last-Event-ID` header gets only what changed since. See "
    "docs/api-streams.md.",
)


def document_stream_responses(auto_schema, operation: dict) -> None:
    """Add the answers of a wait (200, 408, 409) or a watch (text/event-stream) to an operation."""
    view = auto_schema.view
    action = getattr(view, "action", None)
    responses = operation.setdefault("responses", {})
    if action in getattr(view, "wait_actions", ()):
        success = next((responses[code] for code in sorted(responses) if code.startswith("2")), None)
        if success is not None and "200" not in responses:
            responses["200"] = {
                **success,
                "description": "With `wait`: reached. The usual answer, with the deployment read again.",
            }
        for code, serializer, description in (
            ("408", view.waiter.timed_out_serializer, "With `wait`: the state was not reached in time."),
            ("409", view.waiter.failed_serializer, "The action is refused, or with `wait`: it failed."),
        ):
            schema = {"schema": auto_schema.resolve_serializer(serializer, "response").ref}
            responses[code] = {"description": description, "content": {"application/json": schema}}
    if getattr(view, "watch", None) is not None and action in WATCH_ACTIONS and "200" in responses:
        # Replaces what the generator derives from EventStreamRenderer (the object schema): events, as text.
        responses["200"].setdefault("content", {})["text/event-stream"] = {
            "schema": {
                "type": "string",
                "description": f"With `watch=true`: `event: {view.watch.event}` / `event: deleted` records.",
            }
        }
