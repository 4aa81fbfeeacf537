"""One websocket consumer at /ws/. The client sends the full list of groups it wants; each is checked.

The credential the socket opened with (session or API token) is checked again before each client message,
when the user's tokens or account change (`broadcast.credentials_changed`), and before forwarding data once
it is PANEL_WS_RECHECK_S old; a socket whose credential no longer signs in is closed with CLOSE_SIGNED_OUT.
"""

import time

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer
from django.conf import settings
from django.http import HttpRequest
from django.utils import translation

from panel.operations.texts import translated_message
from panel.realtime.auth import credential_still_valid
from panel.realtime.broadcast import carries_frames, user_group
from panel.realtime.frames import hub, joined_text
from panel.realtime.groups import MAX_GROUPS, joinable

# Not signed in, or no longer: a revoked or expired token, a deactivated user, a session that ended. The
# client should sign in again rather than reconnect (static/js/live.js reloads the page, which asks to).
CLOSE_SIGNED_OUT = 4401


def socket_language(scope) -> str:
    """The language the socket's page is in, chosen as LocaleMiddleware chooses it for a request: the
    language cookie, then Accept-Language, then LANGUAGE_CODE."""
    request = HttpRequest()
    request.COOKIES = scope.get("cookies") or {}
    accept = dict(scope.get("headers") or []).get(b"accept-language")
    if accept:
        request.META["HTTP_ACCEPT_LANGUAGE"] = accept.decode("latin-1")
    return translation.get_language_from_request(request)


class PanelConsumer(AsyncJsonWebsocketConsumer):
    async def connect(self):
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            # Refused before accept: nothing is ever sent to an anonymous socket.
            await self.close(code=CLOSE_SIGNED_OUT)
            return
        self.groups_joined: set[str] = set()
        self.credential_checked = time.monotonic()
        self.signed_out = False
        self.language = socket_language(self.scope)
        await self.channel_layer.group_add(user_group(user.pk), self.channel_name)
        await self.accept()

    async def dispatch(self, message):
        # It never touches the database: channels' dispatch would otherwise close stale DB connections in a
        # worker thread before it, a thread hop per message per socket.
        if message["type"] == "panel.message":
            await self.panel_message(message)
        else:
            await super().dispatch(message)

    async def disconnect(self, code):
        await self._leave_all_groups()

    async def _leave_all_groups(self):
        if not hasattr(self, "groups_joined"):  # refused before accept: joined nothing
            return
        await hub().leave(self)
        for group in self.groups_joined | {user_group(self.scope["user"].pk)}:
            await self.channel_layer.group_discard(group, self.channel_name)
        self.groups_joined = set()

    async def _credential_holds(self, *, max_age: float = 0) -> bool:
        """Re-check the socket's credential if the last check is older than `max_age` seconds; when it no
        longer holds, leave every group (nothing more is forwarded) and close."""
        if self.signed_out:
            return False
        if time.monotonic() - self.credential_checked < max_age:
            return True
        if not await credential_still_valid(self.scope):
            self.signed_out = True
            await self._leave_all_groups()
            await self.close(code=CLOSE_SIGNED_OUT)
            return False
        self.credential_checked = time.monotonic()
        return True

    async def _recently_checked(self) -> bool:
        """Before forwarding data: a monotonic-clock comparison, a query every PANEL_WS_RECHECK_S."""
        return await self._credential_holds(max_age=settings.PANEL_WS_RECHECK_S)

    async def panel_credentials(self, event):
        await self._credential_holds()

    async def receive_json(self, content, **kwargs):
        if not await self._credential_holds():
            return
        if not isinstance(content, dict) or content.get("type") != "subscribe":
            await self.send_json({"type": "error", "error": 'Send {"type": "subscribe", "groups": [...]}.'})
            return
        wanted = content.get("groups")
        if (
            not isinstance(wanted, list)
            or not all(isinstance(g, str) for g in wanted)
            or len(wanted) > MAX_GROUPS
        ):
            await self.send_json(
                {"type": "error", "error": f"groups must be a list of at most {MAX_GROUPS} names."}
            )
            return
        wanted_set = set(wanted)
        # Every group is checked against what the user may see, the whole list in one trip to the database.
        allowed = await database_sync_to_async(joinable)(self.scope["user"], wanted_set)
        for group in self.groups_joined - allowed:
            await self.channel_layer.group_discard(group, self.channel_name)
        for group in allowed - self.groups_joined:
            await self.channel_layer.group_add(group, self.channel_name)
        self.groups_joined = allowed
        # Live metrics come through this process's frame hub, not the channel layer; joined before the reply,
        # so a page that back-fills after "subscribed" misses nothing in between.
        if any(carries_frames(g) for g in allowed):
            await hub().join(self)
        else:
            await hub().leave(self)
        await self.send_json(
            {"type": "subscribed", "groups": sorted(allowed), "refused": sorted(wanted_set - allowed)}
        )

    async def panel_message(self, event):
        if event["group"] in self.groups_joined and await self._recently_checked():
            message = translated_message(event["message"], self.language)
            await self.send_json({"group": event["group"], **message})

    async def forward_frames(self, texts: list[str]) -> None:
        """Live metrics frames of the groups this socket joined (picked by the frame hub), as one message."""
        if await self._recently_checked():
            await self.send(text_data=joined_text(texts))
