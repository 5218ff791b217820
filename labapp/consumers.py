"""Websocket consumers of the lab shell (chat and job progress live in rag/ and bench/)."""

from __future__ import annotations

import json
import time
from typing import Any

from channels.generic.websocket import AsyncJsonWebsocketConsumer

from labapp import addresses


class PingConsumer(AsyncJsonWebsocketConsumer):
    """Measures the browser ↔ Daphne ↔ Redis channel layer round trip.

    A ``ping`` goes out through the channel layer (Redis) and comes back to this
    socket as a ``pong``, so one round trip proves Daphne, the websocket and the
    channel layer all work; the status page shows the time it took.
    """

    async def connect(self) -> None:
        await self.accept()

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None, **kwargs: Any) -> None:
        try:
            content = json.loads(text_data or "")
        except ValueError:
            content = None
        if not isinstance(content, dict):
            await self.send_json({"type": "error", "error": "messages must be JSON objects"})
            return
        await self.receive_json(content)

    async def receive_json(self, content: dict[str, Any], **kwargs: Any) -> None:
        if content.get("type") != "ping":
            await self.send_json({"type": "error", "error": 'expected {"type": "ping"}'})
            return
        message = {"type": "echo.pong", "client_sent": content.get("sent"), "server_received": time.time()}
        for attempt in (1, 2):
            try:
                await self.channel_layer.send(self.channel_name, message)
                return
            except Exception as exc:  # Redis down: say so on the socket instead of dropping it
                # Once more first: after Redis restarts, the layer's pooled connection fails once.
                if attempt == 2:
                    said = addresses.scrubbed(
                        f"channel layer (Redis) unavailable: {exc}"
                    )  # REDIS_URL may hold a password
                    await self.send_json({"type": "error", "error": said})

    async def echo_pong(self, event: dict[str, Any]) -> None:
        await self.send_json(
            {
                "type": "pong",
                "sent": event["client_sent"],
                "via": "channel layer",
                "server_received": event["server_received"],
            }
        )
