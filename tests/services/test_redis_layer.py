"""The channels-redis layer as PicoBot configures it (PICOBOT_REDIS_URL), against real Redis."""

from __future__ import annotations

import asyncio

import pytest
from channels.layers import get_channel_layer
from django.test import override_settings

from tests.services.conftest import require_service

pytestmark = [pytest.mark.services]


def redis_layers(url: str) -> dict:
    """CHANNEL_LAYERS exactly as settings.py builds them for ``url``."""
    import importlib
    import os

    from picobot_site import settings as picobot_settings

    old = os.environ.get("PICOBOT_REDIS_URL")
    os.environ["PICOBOT_REDIS_URL"] = url
    try:
        return importlib.reload(picobot_settings).CHANNEL_LAYERS
    finally:
        if old is None:
            del os.environ["PICOBOT_REDIS_URL"]
        else:
            os.environ["PICOBOT_REDIS_URL"] = old
        importlib.reload(picobot_settings)


async def test_an_idle_receive_outlives_the_redis_client_default_read_timeout():
    url = require_service("PICOBOT_TEST_REDIS_URL")
    with override_settings(CHANNEL_LAYERS=redis_layers(url)):
        from channels.layers import channel_layers

        channel_layers.backends = {}
        layer = get_channel_layer()
        channel = await layer.new_channel()
        # Nothing arrives for longer than redis-py's 5 s default socket timeout: the receive must
        # still be waiting (a socket timeout would raise redis TimeoutError instead).
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(layer.receive(channel), timeout=6.5)
        await layer.send(channel, {"type": "still.alive"})
        assert (await asyncio.wait_for(layer.receive(channel), timeout=5))["type"] == "still.alive"
        await layer.flush()
        channel_layers.backends = {}
