"""conversations.auth.websocket._RevocableReceive: a revoked credential ends its socket's receive without a
task per frame (PROTOCOL §1: 4401 when the credential dies while the socket is open)."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from conversations.auth.websocket import CLOSE_REVOKED, _RevocableReceive


class Pipe:
    def __init__(self) -> None:
        self.inbox: asyncio.Queue = asyncio.Queue()
        self.sent: list[dict] = []

    async def receive(self) -> dict:
        return await self.inbox.get()

    async def send(self, message: dict) -> None:
        self.sent.append(message)


async def test_frames_pass_through_and_a_revocation_ends_a_waiting_receive_with_a_4401_close():
    pipe = Pipe()
    guarded = _RevocableReceive(pipe.receive, pipe.send, "API token revoked")
    pipe.inbox.put_nowait({"type": "websocket.receive", "text": "1"})
    assert (await guarded())["text"] == "1"
    waiting = asyncio.ensure_future(guarded())
    await asyncio.sleep(0)
    guarded.revoke()
    assert await asyncio.wait_for(waiting, 1) == {"type": "websocket.disconnect", "code": CLOSE_REVOKED}
    assert not waiting.cancelled() and waiting.cancelling() == 0, "only the wait ended, not the task"
    assert pipe.sent == [{"type": "websocket.close", "code": CLOSE_REVOKED, "reason": "API token revoked"}]
    pipe.inbox.put_nowait({"type": "websocket.receive", "text": "late"})
    assert (await guarded())["type"] == "websocket.disconnect", "nothing is handed over after a revocation"
    assert pipe.inbox.qsize() == 1


async def test_a_frame_that_arrived_with_the_revocation_is_not_handed_to_the_consumer():
    pipe = Pipe()
    guarded = _RevocableReceive(pipe.receive, pipe.send, "signed out")
    waiting = asyncio.ensure_future(guarded())
    await asyncio.sleep(0)
    pipe.inbox.put_nowait({"type": "websocket.receive", "text": "racing"})
    guarded.revoke()
    assert (await asyncio.wait_for(waiting, 1))["type"] == "websocket.disconnect"


async def test_a_revocation_while_the_consumer_is_busy_ends_its_next_receive():
    pipe = Pipe()
    guarded = _RevocableReceive(pipe.receive, pipe.send, "signed out")
    guarded.revoke()
    pipe.inbox.put_nowait({"type": "websocket.receive", "text": "x"})
    assert (await guarded())["code"] == CLOSE_REVOKED
    guarded.revoke()  # again: nothing more happens
    assert len(pipe.sent) == 1 and pipe.inbox.qsize() == 1, "closed once; the waiting frame never read"


async def test_an_outside_cancellation_still_cancels_even_when_it_meets_a_revocation():
    pipe = Pipe()
    guarded = _RevocableReceive(pipe.receive, pipe.send, "signed out")
    waiting = asyncio.ensure_future(guarded())
    await asyncio.sleep(0)
    waiting.cancel()  # the consumer is shutting down
    guarded.revoke()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    plain = asyncio.ensure_future(_RevocableReceive(pipe.receive, pipe.send, "x")())
    await asyncio.sleep(0)
    plain.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await plain
    assert plain.cancelled()
