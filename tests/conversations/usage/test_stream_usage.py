"""The vendors' usage breakdowns reach ``Usage``: cached and reasoning tokens (issue 17).

Real recordings (RC-07: DeepSeek's ``completion_tokens_details.reasoning_tokens``; RC-09/RC-12:
Anthropic's ``cache_*_input_tokens``) and the same streams with cache hits written in, read whole
and one byte at a time through the real HTTP providers.
"""

from __future__ import annotations

import pytest

from providers.messages import Usage
from tests.providers._cases import delivery_modes, load_case, make_provider, mock_transport, run_stream


async def _usage(case_id: str, body: bytes, mode: str) -> Usage | None:
    case = load_case(case_id)
    case.body = body
    pieces = delivery_modes(case)[mode]
    provider = make_provider(case_id, transport=mock_transport(200, case.headers, pieces))
    result, _ = await run_stream(provider)
    assert result.error is None
    return result.usage


@pytest.mark.parametrize("mode", ["whole", "1-byte"])
async def test_rc_07_openai_reasoning_tokens_are_read_from_completion_details(mode: str) -> None:
    usage = await _usage("RC-07", load_case("RC-07").body, mode)
    assert usage == Usage(input_tokens=97, output_tokens=106, cached_tokens=0, reasoning_tokens=88)


@pytest.mark.parametrize("mode", ["whole", "1-byte"])
async def test_sc_10_openai_cached_prompt_tokens_are_read_from_prompt_details(mode: str) -> None:
    original = load_case("SC-10").body
    body = original.replace(
        b'"prompt_tokens":12,', b'"prompt_tokens":12,"prompt_tokens_details":{"cached_tokens":5},'
    )
    assert body != original
    usage = await _usage("SC-10", body, mode)
    assert usage == Usage(input_tokens=12, output_tokens=5, cached_tokens=5)


@pytest.mark.parametrize("mode", ["whole", "1-byte"])
async def test_rc_09_anthropic_without_cache_hits_counts_plain_input(mode: str) -> None:
    usage = await _usage("RC-09", load_case("RC-09").body, mode)
    assert usage == Usage(input_tokens=12, output_tokens=30, cached_tokens=0)


@pytest.mark.parametrize("mode", ["whole", "1-byte"])
async def test_rc_12_anthropic_cache_reads_and_writes_are_part_of_input_and_reads_are_cached(
    mode: str,
) -> None:
    body = load_case("RC-12").body.replace(
        b'"cache_creation_input_tokens":0,"cache_read_input_tokens":0',
        b'"cache_creation_input_tokens":100,"cache_read_input_tokens":2000',
        1,
    )
    assert body != load_case("RC-12").body
    usage = await _usage("RC-12", body, mode)
    assert usage == Usage(input_tokens=377 + 100 + 2000, output_tokens=65, cached_tokens=2000)


def test_openai_usage_details_that_are_malformed_or_exceed_the_totals_are_bounded() -> None:
    from providers._openai_stream import _usage as parse

    assert parse({"prompt_tokens": 10, "prompt_tokens_details": None}) == Usage(10, 0)
    assert parse({"prompt_tokens": 10, "prompt_tokens_details": {"cached_tokens": "3"}}) == Usage(10, 0)
    assert parse({"prompt_tokens": 10, "prompt_tokens_details": {"cached_tokens": 30}}) == Usage(10, 0, 10)
    assert parse(
        {"input_tokens": 8, "output_tokens": 4, "output_tokens_details": {"reasoning_tokens": 3}}
    ) == Usage(8, 4, 0, 3)
