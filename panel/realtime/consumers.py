"""One websocket consumer at /ws/. The client sends the full list of groups it wants; each is checked."""

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer

from panel.realtime.broadcast import FRAMES, carries_frames
from panel.realtime.groups import MAX_GROUPS, may_join

# Handlers that never touch the database: channels' dispatch would otherwise close stale DB connections in a
# worker thread before each one, a thread hop per message per socket on the metrics path.
NO_DATABASE = frozenset({"panel.message", "panel.frames"})


class PanelConsumer(AsyncJsonWebsocketConsumer):
    async def connect(self):
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close(code=4401)  # refused before accept: nothing is ever sent to an anonymous socket
            return
        self.groups_joined: set[str] = set()
        await self.accept()

    async def dispatch(self, message):
        if message["type"] == "panel.message":
            await self.panel_message(message)
        elif message["type"] == "panel.frames":
            await self.panel_frames(message)
        else:
            await super().dispatch(message)

    async def disconnect(self, code):
        for group in self._layer_groups(getattr(self, "groups_joined", set())):
            await self.channel_layer.group_discard(group, self.channel_name)

    async def receive_json(self, content, **kwargs):
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
        allowed = {g for g in wanted_set if await database_sync_to_async(may_join)(self.scope["user"], g)}
        before, after = self._layer_groups(self.groups_joined), self._layer_groups(allowed)
        for group in before - after:
            await self.channel_layer.group_discard(group, self.channel_name)
        for group in after - before:
            await self.channel_layer.group_add(group, self.channel_name)
        self.groups_joined = allowed
        await self.send_json(
            {"type": "subscribed", "groups": sorted(allowed), "refused": sorted(wanted_set - allowed)}
        )

    @staticmethod
    def _layer_groups(joined: set[str]) -> set[str]:
        """Channel-layer groups for the groups a client joined: those, plus FRAMES when any of them gets live
        metrics in frame batches."""
        return joined | {FRAMES} if any(carries_frames(g) for g in joined) else set(joined)

    async def panel_message(self, event):
        if event["group"] in self.groups_joined:
            await self.send_json({"group": event["group"], **event["message"]})

    async def panel_frames(self, event):
        for group, text in event["frames"]:
            if group in self.groups_joined:
                await self.send(text_data=text)
