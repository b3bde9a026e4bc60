"""``LoopDispatch``: consumer handlers run on the loop, without Channels' per-message thread hop."""

from __future__ import annotations

import pytest


async def test_loop_dispatch_calls_the_handler_on_the_loop_and_refuses_unknown_types():
    from conversations.runtime.consumer_base import LoopDispatch

    class Consumer(LoopDispatch):
        def __init__(self) -> None:
            self.seen: list[dict] = []

        async def chat_frame(self, message: dict) -> None:
            self.seen.append(message)

    consumer = Consumer()
    await consumer.dispatch({"type": "chat.frame", "json": "{}"})
    assert consumer.seen == [{"type": "chat.frame", "json": "{}"}]
    with pytest.raises(ValueError, match="No handler for message type nope.frame"):
        await consumer.dispatch({"type": "nope.frame"})
