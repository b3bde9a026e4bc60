"""Every case in tests/cases, through the real providers over httpx2.MockTransport.

Each case is read whole, one read per SSE event and one byte at a time (SC-13 also at its
offsets inside multi-byte characters); all modes must give the expected result.
"""

from __future__ import annotations

import pytest

from providers.blocks import RedactedThinkingBlock, TextBlock, ThinkingBlock, ToolUseBlock
from providers.chunks import TextDelta
from tests.providers._cases import (
    assert_matches,
    case_ids,
    delivery_modes,
    load_case,
    make_provider,
    mock_transport,
    normalise,
    run_stream,
)


@pytest.mark.parametrize("case_id", case_ids())
async def test_stream_case(case_id: str) -> None:
    case = load_case(case_id)
    for mode, pieces in delivery_modes(case).items():
        provider = make_provider(case_id, transport=mock_transport(case.status, case.headers, pieces))
        result, chunks = await run_stream(provider)
        where = f"{case_id} ({mode})"
        assert_matches(normalise(result), case.expected, where)
        _extra_assertions(case_id, result, chunks, where)


def _extra_assertions(case_id, result, chunks, where) -> None:
    texts = [c.text for c in chunks if isinstance(c, TextDelta)]
    if case_id == "SC-01":
        for fragment in ("<think>", "</think>", "<thi", "nk>"):
            assert not any(fragment in t for t in texts), f"{where}: {fragment!r} leaked into a text delta"
    if case_id == "SC-22":
        thinking = [b for b in result.to_message().content if isinstance(b, ThinkingBlock)]
        assert [b.signature for b in thinking] == ["U0MyMi1leGFtcGxlLXNpZ25hdHVyZS1ub3QtcmVhbA=="], where
    if case_id == "SC-23":
        content = result.to_message().content
        assert [type(b) for b in content] == [RedactedThinkingBlock, TextBlock], where
        assert content[0].data == "RVhBTVBMRS1SRURBQ1RFRC1QQVlMT0FELVNDMjM=", where
        assert result.reasoning is None and result.to_message().reasoning is None, where
    if case_id == "SC-25":
        assert [type(b) for b in result.to_message().content] == [ToolUseBlock], where


def test_every_case_file_has_an_expectation() -> None:
    ids = case_ids()
    assert len(ids) == len(set(ids)) >= 29
    for case_id in ids:
        assert set(load_case(case_id).expected) == {
            "text",
            "reasoning",
            "tool_calls",
            "usage",
            "finish_reason",
            "error",
        }


async def test_sc02_without_implicit_start_keeps_the_literal_tag_as_text() -> None:
    case = load_case("SC-02")
    provider = make_provider("SC-01", transport=mock_transport(200, case.headers, [case.body]))
    result, _ = await run_stream(provider)
    assert "</think>" in result.text and result.reasoning is None


async def test_sc20_variant_null_body_is_an_http_error_without_code() -> None:
    provider = make_provider(
        "SC-20", transport=mock_transport(200, {"content-type": "application/json"}, [b"null"])
    )
    result, chunks = await run_stream(provider)
    assert chunks == []
    assert result.error is not None
    assert (result.error.kind, result.error.http_status, result.error.provider_code) == (
        "http_error",
        200,
        None,
    )


async def test_sc21_variant_anthropic_rate_limit_body_maps_to_rate_limited() -> None:
    body = b'{"type":"error","error":{"type":"rate_limit_error","message":"Number of requests has exceeded your rate limit."}}'
    headers = {"content-type": "application/json", "retry-after": "3"}
    provider = make_provider("SC-22", transport=mock_transport(429, headers, [body]))
    result, _ = await run_stream(provider)
    assert result.error is not None
    assert result.error.to_dict() == {
        "kind": "rate_limited",
        "http_status": 429,
        "provider_code": "rate_limit_error",
        "message": "Number of requests has exceeded your rate limit.",
        "retry_after_s": 3.0,
    }


async def test_think_tags_can_be_turned_off_per_model() -> None:
    case = load_case("SC-01")
    provider = make_provider(
        "SC-01", transport=mock_transport(200, case.headers, [case.body]), think_tags=False
    )
    result, _ = await run_stream(provider)
    assert result.text.startswith("<think>") and result.reasoning is None


@pytest.mark.parametrize(("case_id", "truncated"), [("SC-11", True), ("SC-05", True), ("SC-01", False)])
async def test_an_answer_stopped_at_the_output_limit_is_truncated(case_id: str, truncated: bool) -> None:
    case = load_case(case_id)
    provider = make_provider(case_id, transport=mock_transport(case.status, case.headers, [case.body]))
    result, _ = await run_stream(provider)
    assert result.truncated is truncated and result.finished_normally is not truncated
