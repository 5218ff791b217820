"""Job progress pushed to the job's page. Hints only: the page can always rebuild from the row."""

from __future__ import annotations

import time
from typing import Any

from channels.db import database_sync_to_async
from django.contrib.auth.models import AnonymousUser
from django.http import Http404

from bench import access
from labapp import sockets

CLOSE_NOT_FOUND = 4404
RECHECK_PUSH_S = 1.0


def group_name(job_id: int) -> str:
    return f"bench-job-{job_id}"


class JobProgressConsumer(sockets.SessionSocket):
    checked_at = 0.0  # when the session was last re-read (time.monotonic)

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
        self.checked_at = time.monotonic()
        await self.accept()

    async def disconnect(self, code: int) -> None:
        for group in getattr(self, "groups_joined", []):
            await self.channel_layer.group_discard(group, self.channel_name)

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None, **kwargs: Any) -> None:
        """The page sends nothing; any frame only re-checks the session (labapp.sockets)."""
        await self._still_signed_in()

    async def job_progress(self, event: dict[str, Any]) -> None:
        if self.session_over:
            return
        # Pushes may come many a second: the session is re-read at most once a second.
        if time.monotonic() - self.checked_at >= RECHECK_PUSH_S and not await self._still_signed_in():
            return
        await self.send_json({key: value for key, value in event.items() if key != "type"})

    async def user_signed_out(self, event: dict[str, Any]) -> None:
        if not self.session_over and await sockets.ends_session(event, self.scope):
            await self.end_session()

    async def _still_signed_in(self) -> bool:
        self.checked_at = time.monotonic()
        return await self.session_still_valid()  # an event missed (layer down) ends it here
