"""Think tags through the real providers (read whole, per event and byte by byte).

With ``implicit_think_start`` a server that streams reasoning separately switches the implicit
span off, a reply without a closing tag is text, and an explicit opening tag is not leaked; an
unterminated closing tag does not leak into the reasoning; a held tag prefix is not shown when the
stream fails, nor does it block the retry; native Anthropic text with a literal tag stays text.
The splitter's own rules are in ``test_think.py``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx2

from providers.chunks import ReasoningDelta
from providers.testing import sse_body
from tests.providers._cases import run_stream
from tests.providers._mock_sse import (
    MS,
    MSTOP,
    ROLE,
    SSE,
    _provider,
    _transport,
    all_modes,
    bd,
    bs,
    md,
    oc,
    st,
    texts,
)


async def test_implicit_start_switches_off_when_the_server_separates_reasoning() -> None:
    body = sse_body(
        [
            ROLE,
            oc({"reasoning_content": "thinking hard"}),
            oc({"content": "The answer is 4."}),
            oc({}, "stop"),
        ]
    )
    for mode, result, _ in await all_modes(body, implicit_think_start=True):
        assert (result.text, result.reasoning) == ("The answer is 4.", "thinking hard"), mode


async def test_implicit_start_without_a_closing_tag_is_text() -> None:
    body = sse_body([ROLE, oc({"content": "Hello there, "}), oc({"content": "no thinking."}), oc({}, "stop")])
    for mode, result, _ in await all_modes(body, implicit_think_start=True):
        assert (result.text, result.reasoning) == ("Hello there, no thinking.", None), mode


async def test_implicit_start_with_an_explicit_opening_tag_does_not_leak_it() -> None:
    body = sse_body([ROLE, oc({"content": "<think>\nr\n</think>\n\nAns"}), oc({}, "stop"), "[DONE]"])
    for mode, result, chunks in await all_modes(body, implicit_think_start=True):
        assert (result.text, result.reasoning) == ("Ans", "r"), mode
        assert "<think>" not in "".join(c.text for c in chunks if isinstance(c, ReasoningDelta)), mode


async def test_an_unterminated_closing_tag_does_not_leak_into_reasoning() -> None:
    body = sse_body([ROLE, oc({"content": "<think>abc</thi"}), oc({}, "stop"), "[DONE]"])
    for mode, result, _ in await all_modes(body):
        assert (result.reasoning, result.text) == ("abc", ""), mode


async def test_a_held_tag_prefix_is_not_shown_and_does_not_block_a_retry() -> None:
    half = sse_body([ROLE, oc({"content": "<thi"})])
    ok = sse_body([ROLE, oc({"content": "hello"}), oc({}, "stop"), "[DONE]"])

    def resets():
        async def body() -> AsyncIterator[bytes]:
            yield half
            raise httpx2.ReadError("reset")

        return body

    provider = _provider(
        "openai", _transport([(200, SSE, resets()), (200, SSE, [ok])]), max_retries=1, retry_backoff=0.0
    )  # noqa: E501
    result, chunks = await run_stream(provider)
    assert (result.error, result.text) == (None, "hello")
    assert "<thi" not in texts(chunks)


async def test_anthropic_text_with_a_literal_think_tag_stays_text() -> None:
    text = "Use the <reasoning> tag like <reasoning>x</reasoning>."
    body = sse_body(
        [
            MS,
            bs(0, {"type": "text", "text": ""}),
            bd(0, {"type": "text_delta", "text": text}),
            st(0),
            md("end_turn"),
            MSTOP,
        ]
    )  # noqa: E501
    for mode, result, _ in await all_modes(body, "anthropic"):
        assert (result.text, result.reasoning) == (text, None), mode
