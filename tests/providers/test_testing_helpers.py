"""providers.testing: the helpers other apps' tests rely on."""

from __future__ import annotations

import subprocess
import sys

import pytest

from providers.chunks import Done, TextDelta
from providers.errors import OverloadedError, RateLimitedError
from providers.messages import Message
from providers.sse import iter_sse_events
from providers.testing import (
    ScriptedProvider,
    script_text,
    script_tool_call,
    split_events,
    split_every,
    sse_body,
)
from providers.types import ProviderRequest

REQUEST = ProviderRequest([Message.user("hi")])


async def test_scripted_provider_plays_responses_in_order_and_records_requests() -> None:
    provider = ScriptedProvider(
        [script_text("Hello there", reasoning="hmm"), script_tool_call("c1", "current_time", {"tz": "UTC"})]
    )
    first = await provider.collect(REQUEST)
    second = await provider.collect(ProviderRequest([Message.user("time?")]))
    assert (first.text, first.reasoning, first.finish_reason) == ("Hello there", "hmm", "stop")
    assert second.tool_calls[0].arguments() == {"tz": "UTC"} and second.finish_reason == "tool_calls"
    assert [r.messages[-1].text for r in provider.requests] == ["hi", "time?"]


async def test_scripted_errors_before_and_during_a_stream() -> None:
    provider = ScriptedProvider(
        [RateLimitedError("slow down", retry_after_s=1.0), [TextDelta("part"), OverloadedError("gone")]]
    )
    with pytest.raises(RateLimitedError):
        await provider.collect(REQUEST)
    seen = []
    with pytest.raises(OverloadedError):
        async for chunk in provider.stream(REQUEST):
            seen.append(chunk)
    assert seen == [TextDelta("part")]


async def test_scripted_provider_fails_clearly_when_exhausted() -> None:
    provider = ScriptedProvider([[Done("stop")]], delay=0.001)
    await provider.collect(REQUEST)
    with pytest.raises(RuntimeError, match="call #2"):
        await provider.collect(REQUEST)


def test_sse_body_shapes() -> None:
    body = sse_body([{"a": 1}, ("message_stop", {"type": "message_stop"}), b": keep-alive\n\n", "[DONE]"])
    assert (
        body
        == b'data: {"a": 1}\n\nevent: message_stop\ndata: {"type": "message_stop"}\n\n: keep-alive\n\ndata: [DONE]\n\n'
    )
    assert [e.data for e in iter_sse_events([body])] == ['{"a": 1}', '{"type": "message_stop"}', "[DONE]"]


def test_splitters() -> None:
    assert split_events(b"a\n\nb\n\nc") == [b"a\n\n", b"b\n\n", b"c"]
    assert split_every(b"abcde", 2) == [b"ab", b"cd", b"e"]


def test_providers_import_no_django_or_channels() -> None:
    code = (
        "import sys, pkgutil, importlib, providers\n"
        "for m in pkgutil.iter_modules(providers.__path__): importlib.import_module('providers.' + m.name)\n"
        "bad = sorted(n for n in sys.modules if n.split('.')[0] in ('django', 'channels', 'daphne'))\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, env={"PYTHONPATH": "."}, cwd=_repo_root())


def _repo_root() -> str:
    from pathlib import Path

    return str(Path(__file__).resolve().parents[2])
