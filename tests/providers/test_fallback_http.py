"""The fallback chain over real HTTP: two local OpenAI-compatible servers (issue 17, Must show 2).

The first preset's provider is built as the runtime builds a preset before a fallback
(``retry_elsewhere = falls_back``): it does not retry what the next preset takes, while the last
preset keeps the bounded retry honouring ``Retry-After``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
from collections.abc import Iterator

import pytest

from providers.errors import AuthenticationError, ContextOverflowError
from providers.fallback import FallbackProvider, FallbackSwitch, falls_back
from providers.messages import Message, ToolUseBlock
from providers.openai_compat import OpenAICompatProvider
from providers.replay_identity import replay_identity
from providers.testing import LocalSSEServer, SSEResponse, openai_events, sse_body
from providers.types import ProviderRequest

REQUEST = ProviderRequest(messages=[Message.user("hi")])
JSON = {"content-type": "application/json"}


def answer(text: str) -> SSEResponse:
    return SSEResponse(pieces=[sse_body(openai_events(text))])


def error(status: int, message: str, headers: dict[str, str] | None = None, code: str = "") -> SSEResponse:
    body = json.dumps({"error": {"message": message, "type": code or "error", "code": code or None}})
    return SSEResponse(status, {**JSON, **(headers or {})}, [body.encode()], chunked=False)


def provider(url: str, *, before_fallback: bool, connect_timeout: float = 5.0) -> OpenAICompatProvider:
    built = OpenAICompatProvider(url, "k", "m", max_retries=2, connect_timeout=connect_timeout)
    if before_fallback:
        built.retry_elsewhere = falls_back
    return built


class Switches(list):
    async def __call__(self, switch: FallbackSwitch) -> None:
        self.append(switch)


async def run_chain(a_url: str, b_url: str, request: ProviderRequest = REQUEST, **a_options):
    a = provider(a_url, before_fallback=True, **a_options)
    b = provider(b_url, before_fallback=False)
    switches = Switches()
    try:
        response = await FallbackProvider([("A", a), ("B", b)], switches).collect(request)
    finally:
        await a.aclose()
        await b.aclose()
    return response, switches


@pytest.mark.parametrize(
    ("first", "kind"),
    [
        (error(429, "Rate limit reached", {"retry-after": "30"}, "rate_limit_exceeded"), "rate_limited"),
        (error(529, "Overloaded", code="overloaded_error"), "overloaded"),
        (error(503, "Service Unavailable"), "overloaded"),
    ],
    ids=["429-retry-after", "529", "503"],
)
async def test_the_first_presets_refusal_answers_from_the_second_at_once(first, kind):
    async with LocalSSEServer([first]) as a, LocalSSEServer([answer("from b")]) as b:
        response, switches = await run_chain(a.base_url, b.base_url)
    assert response.text == "from b"
    assert len(a.recorded) == 1, "no retry of the preset that has a fallback"
    assert len(b.recorded) == 1 and not a.errors and not b.errors
    assert [(s.failed, s.next, s.error.kind) for s in switches] == [("A", "B", kind)]


@contextlib.contextmanager
def blackhole() -> Iterator[str]:
    """A loopback port whose accept queue is full: a connect there never completes."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(0)
    port = server.getsockname()[1]
    fillers = []
    for _ in range(3):
        filler = socket.socket()
        filler.setblocking(False)
        with contextlib.suppress(BlockingIOError):
            filler.connect(("127.0.0.1", port))
        fillers.append(filler)
    try:
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        for sock in (*fillers, server):
            sock.close()


async def test_a_connect_timeout_on_the_first_preset_answers_from_the_second():
    with blackhole() as dead_url:
        await asyncio.sleep(0.1)  # the fillers' handshakes complete and fill the queue
        async with LocalSSEServer([answer("from b")]) as b:
            response, switches = await run_chain(dead_url, b.base_url, connect_timeout=0.3)
    assert response.text == "from b"
    assert [(s.error.kind, s.error.phase) for s in switches] == [("timeout", "connect")]


async def test_the_last_preset_keeps_its_bounded_retry_honouring_retry_after():
    async with (
        LocalSSEServer([error(429, "slow down", {"retry-after": "30"})]) as a,
        LocalSSEServer([error(429, "slow down", {"retry-after": "0"}), answer("from b")]) as b,
    ):
        response, _ = await run_chain(a.base_url, b.base_url)
    assert response.text == "from b"
    assert (len(a.recorded), len(b.recorded)) == (1, 2)


@pytest.mark.parametrize(
    ("first", "raised"),
    [
        (error(401, "Incorrect API key provided", code="invalid_api_key"), AuthenticationError),
        (
            error(400, "This model's maximum context length is 8192 tokens", code="context_length_exceeded"),
            ContextOverflowError,
        ),
    ],
    ids=["401", "context-overflow"],
)
async def test_an_auth_error_or_a_context_overflow_does_not_fall_back(first, raised):
    async with LocalSSEServer([first]) as a, LocalSSEServer([answer("never")]) as b:
        with pytest.raises(raised):
            await run_chain(a.base_url, b.base_url)
    assert len(a.recorded) == 1 and not b.recorded


async def test_output_already_shown_is_never_followed_by_a_fallback():
    # The upstream drops after the first words (a truncation: only a scripted provider can fail
    # with a try-elsewhere type after output, tests/providers/test_fallback.py covers that).
    cut = sse_body(openai_events("partial answer", done=False)[:2])
    async with (
        LocalSSEServer([SSEResponse(pieces=[cut], abort=True)]) as a,
        LocalSSEServer([answer("never")]) as b,
    ):
        a_provider = provider(a.base_url, before_fallback=True)
        b_provider = provider(b.base_url, before_fallback=False)
        shown = []
        with pytest.raises(Exception) as raised:
            async for chunk in FallbackProvider([("A", a_provider), ("B", b_provider)]).stream(REQUEST):
                shown.append(getattr(chunk, "text", ""))
        await a_provider.aclose()
        await b_provider.aclose()
    assert "".join(shown).startswith("partial") and not b.recorded
    assert raised.value.kind == "truncated"


async def test_a_fallback_never_receives_the_first_presets_replay_state():
    async with LocalSSEServer([error(429, "slow down")]) as a, LocalSSEServer([answer("from b")]) as b:
        a_endpoint = a.base_url.removeprefix("http://")
        state = {**replay_identity("openai", a_endpoint), "reasoning_field": "reasoning_content"}
        history = [
            Message.user("what time is it?"),
            Message.assistant(
                reasoning="A's private reasoning",
                tool_calls=[ToolUseBlock("c1", "clock", {})],
                provider_state=state,
            ),
            Message.tool_result("c1", "12:00"),
        ]
        response, _ = await run_chain(a.base_url, b.base_url, ProviderRequest(messages=history))
    assert response.text == "from b"
    sent_to_a = a.recorded[0].json()["messages"][1]
    sent_to_b = b.recorded[0].json()["messages"][1]
    assert sent_to_a["reasoning_content"] == "A's private reasoning"  # A's own state goes back to A
    assert "reasoning_content" not in sent_to_b and "A's private" not in b.recorded[0].body.decode()
