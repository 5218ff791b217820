"""The channel layer's Redis connections against a real Redis: a consumer may wait for its next
message as long as it likes (labapp.settings.CHANNEL_LAYERS)."""

from __future__ import annotations

import asyncio

import pytest
from channels.layers import get_channel_layer
from channels_redis.core import RedisChannelLayer
from channels_redis.utils import create_pool

from tests import aio
from tests.conftest import ServiceFaults


def test_a_layer_connection_may_read_longer_than_the_layers_blocking_wait() -> None:
    """redis-py 8 reads for at most 5 s by default, the length of channels_redis's BZPOPMIN: the two
    raced and an idle consumer's socket was closed with 1011. The settings give the reads a margin."""
    layer = get_channel_layer()
    assert isinstance(layer, RedisChannelLayer)
    timeout = create_pool(layer.hosts[0]).connection_kwargs["socket_timeout"]
    assert timeout is not None and timeout >= layer.brpop_timeout + 5


@pytest.mark.integration
def test_an_idle_consumer_waits_through_several_blocking_waits_and_then_gets_its_message(redis_server: str) -> None:
    """Three of channels_redis's 5 s waits in a row with no message raise nothing; a message sent
    afterwards arrives. (With redis-py 8's default read timeout, the first wait raised TimeoutError.)"""
    layer = get_channel_layer()
    assert isinstance(layer, RedisChannelLayer)

    async def go() -> dict[str, object]:
        channel = await layer.new_channel()
        waiting = asyncio.ensure_future(layer.receive(channel))
        done, _ = await asyncio.wait([waiting], timeout=3 * layer.brpop_timeout + 1)
        assert not done, waiting.exception()  # still waiting, not failed
        await layer.send(channel, {"type": "hello", "n": 1})
        message: dict[str, object] = await asyncio.wait_for(waiting, 10)
        await layer.close_pools()
        return message

    assert aio.run(go()) == {"type": "hello", "n": 1}


@pytest.mark.integration
def test_after_redis_restarts_the_layers_pooled_connections_carry_the_next_message_at_once(
    redis_server: str, service_faults: ServiceFaults
) -> None:
    """A pool made from a URL gives its connections no retry: the first send after a restart failed on
    the dead pooled connection ("Connection lost"), and a consumer's socket closed with 1011."""
    layer = get_channel_layer()
    assert isinstance(layer, RedisChannelLayer)

    async def go() -> list[dict[str, object]]:
        channel = await layer.new_channel()
        got = []
        for n in (1, 2):
            await layer.send(channel, {"type": "hello", "n": n})
            got.append(await asyncio.wait_for(layer.receive(channel), 10))
            if n == 1:  # the pool now holds connections to this Redis: restart it under them
                await asyncio.to_thread(service_faults.kill, "redis")
                await asyncio.to_thread(service_faults.restart, "redis")
        await layer.close_pools()
        return got

    assert aio.run(go()) == [{"type": "hello", "n": 1}, {"type": "hello", "n": 2}]
