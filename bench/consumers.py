"""Job progress pushed to the job's page. Hints only: the page can always rebuild from the row."""

from __future__ import annotations

from typing import Any

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer
from django.contrib.auth.models import AnonymousUser
from django.http import Http404

from bench import access
from labapp import sockets

CLOSE_NOT_FOUND = 4404


def group_name(job_id: int) -> str:
    return f"bench-job-{job_id}"


class JobProgressConsumer(AsyncJsonWebsocketConsumer):
    async def connect(self) -> None:
        if await sockets.password_change_due(self.scope):
            await self.close(code=sockets.CLOSE_PASSWORD_CHANGE)  # a temporary password: change it first
            return
        user = self.scope.get("user")
        job_id = int(self.scope["url_route"]["kwargs"]["job_id"])
        try:
            await database_sync_to_async(access.job_for)(user or AnonymousUser(), job_id)
        except Http404:
            await self.close(code=CLOSE_NOT_FOUND)  # another user's job does not exist for them
            return
        self.groups_joined = [group_name(job_id), sockets.user_group(user.pk)]  # the second: sign-out closes it
        for group in self.groups_joined:
            await self.channel_layer.group_add(group, self.channel_name)
        await self.accept()

    async def disconnect(self, code: int) -> None:
        for group in getattr(self, "groups_joined", []):
            await self.channel_layer.group_discard(group, self.channel_name)

    async def job_progress(self, event: dict[str, Any]) -> None:
        await self.send_json({key: value for key, value in event.items() if key != "type"})

    async def user_signed_out(self, event: dict[str, Any]) -> None:
        if await sockets.ends_session(event, sockets.scope_session_key(self.scope)):
            await self.close(code=sockets.CLOSE_SIGNED_OUT)
