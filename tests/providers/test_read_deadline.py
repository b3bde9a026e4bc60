"""The provider's read deadline (``providers._read_deadline.ReadDeadline``): first-byte and idle timeouts
bound each read only, never the caller's own time between chunks, and never turn a cancel into a
timeout. Margins are wide (4× or more) so a loaded machine cannot flip a result."""

from __future__ import annotations

import asyncio
import time

import httpx2
import pytest

from providers.chunks import TextDelta
from providers.errors import ProviderTimeoutError
from providers.messages import Message
from providers.openai_compat import OpenAICompatProvider
from providers.testing import openai_events, split_events, sse_body
from providers.types import ProviderRequest

REQUEST = ProviderRequest([Message.user("Hi")])
STALLED_BODY = sse_body(openai_events("x y"))


async def stall_after_first_piece():
    """A body that sends 150 bytes, then goes silent for 5 s (far beyond every idle limit here)."""
    yield STALLED_BODY[:150]
    await asyncio.sleep(5)
    yield STALLED_BODY[150:]


def _provider(stream_factory, **kw):
    def handler(request):
        return httpx2.Response(200, headers={"content-type": "text/event-stream"}, content=stream_factory())

    kw.setdefault("max_retries", 0)
    return OpenAICompatProvider("http://x/v1", "k", "m", transport=httpx2.MockTransport(handler), **kw)


async def test_time_the_caller_spends_between_chunks_is_not_idle_time() -> None:
    body = split_events(sse_body(openai_events("one two three four")))

    async def fast():
        for p in body:
            yield p

    provider = _provider(fast, idle_timeout=0.05, first_byte_timeout=0.05)
    texts = []
    async for chunk in provider.stream(REQUEST):
        await asyncio.sleep(0.12)  # slower than idle_timeout, outside any read
        if isinstance(chunk, TextDelta):
            texts.append(chunk.text)
    assert "".join(texts) == "one two three four"


async def test_each_read_gets_the_full_idle_timeout() -> None:
    body = split_events(sse_body(openai_events("a b c d e f")))

    async def steady():
        for p in body:
            await asyncio.sleep(0.05)  # each gap < idle 0.2, total > 0.2
            yield p

    assert len(body) * 0.05 > 0.2
    provider = _provider(steady, idle_timeout=0.2, first_byte_timeout=0.2)
    assert (await provider.collect(REQUEST)).text == "a b c d e f"


async def test_a_long_first_byte_timeout_then_a_short_idle_timeout_fires_on_time() -> None:
    provider = _provider(stall_after_first_piece, idle_timeout=0.1, first_byte_timeout=30)
    started = time.monotonic()
    with pytest.raises(ProviderTimeoutError) as info:
        await provider.collect(REQUEST)
    # The stall lasts 5 s and the first-byte limit is 30 s: only the idle limit ends it this soon.
    assert info.value.phase == "idle" and time.monotonic() - started < 4.0


async def test_cancelling_the_caller_during_a_read_is_a_cancellation_not_a_timeout() -> None:
    provider = _provider(stall_after_first_piece, idle_timeout=0.2)
    task = asyncio.ensure_future(provider.collect(REQUEST))
    await asyncio.sleep(0.05)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await asyncio.sleep(0.3)  # the idle timer must not fire into anything afterwards


async def test_cancel_racing_the_deadline_stays_a_cancellation() -> None:
    provider = _provider(stall_after_first_piece, idle_timeout=0.1)
    task = asyncio.ensure_future(provider.collect(REQUEST))
    loop = asyncio.get_running_loop()
    await asyncio.sleep(0.02)
    # Cancel at about the same time as the deadline fires.
    loop.call_at(loop.time() + 0.08, task.cancel)
    with pytest.raises((asyncio.CancelledError, ProviderTimeoutError)):
        await task
    assert task.cancelled() or isinstance(task.exception(), ProviderTimeoutError)


async def test_stream_driven_from_several_tasks_still_times_out() -> None:
    provider = _provider(stall_after_first_piece, idle_timeout=0.1)
    stream = provider.stream(REQUEST)
    with pytest.raises(ProviderTimeoutError):
        while True:
            # each anext in its own task (as asyncio.wait_for does on 3.11)
            await asyncio.wait_for(anext(stream), 2.0)
