"""A context overflow carries the sizes the provider's error stated (issue 17).

``ContextOverflowError.limit_tokens`` / ``requested_tokens`` / ``prompt_tokens`` /
``output_tokens`` are read once, where vendor errors become typed ones (``_errorbody``): from the
wordings of OpenAI, DeepSeek, vLLM, OpenRouter, Anthropic, llama.cpp (also its ``n_ctx`` /
``n_prompt_tokens`` fields), LM Studio, Mistral, Gemini and xAI. A number that follows from two
stated ones is filled in; unknown wording gives None everywhere.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from providers._errorbody import error_from_http, error_from_unframed
from providers._openai_stream import OpenAIStreamParser
from providers._overflow_sizes import overflow_sizes
from providers.errors import ContextOverflowError
from tests.providers._cases import run_stream
from tests.providers._mock_sse import _provider, _transport
from tests.providers.test_stream_parsers import run

SIZES = ("limit_tokens", "requested_tokens", "prompt_tokens", "output_tokens")

WORDINGS = [
    pytest.param(
        "This model's maximum context length is 8192 tokens. However, you requested 9000 tokens "
        "(5000 in the messages, 4000 in the completion). Please reduce the length of the messages or "
        "completion.",
        (8192, 9000, 5000, 4000),
        id="openai",
    ),
    pytest.param(
        "This model's maximum context length is 4097 tokens. However, you requested 9000 tokens (4000 in "
        "the messages, 1000 in the functions, and 4000 in the completion).",
        (4097, 9000, 5000, 4000),
        id="openai-functions",
    ),
    pytest.param(
        "This model's maximum context length is 128000 tokens. However, your messages resulted in 204308 "
        "tokens. Please reduce the length of the messages.",
        (128000, None, 204308, None),
        id="openai-messages",
    ),
    pytest.param(
        "This model's maximum context length is 4097 tokens, however you requested 4322 tokens (4066 in "
        "your prompt; 256 for the completion). Please reduce your prompt; or completion length.",
        (4097, 4322, 4066, 256),
        id="openai-legacy",
    ),
    pytest.param(
        "Input tokens exceed the configured limit of 272000 tokens. Your messages resulted in 300000 "
        "tokens. Please reduce the length of the messages.",
        (272000, None, 300000, None),
        id="openai-responses",
    ),
    pytest.param(
        "This model's maximum context length is 131072 tokens. However, you requested 131134 tokens "
        "(122942 in the messages, 8192 in the completion). Please reduce the length of the messages or "
        "completion.",
        (131072, 131134, 122942, 8192),
        id="deepseek",
    ),
    pytest.param(
        "This model's maximum context length is 16384 tokens. However, you requested 19591 tokens (9591 in "
        "the messages, 10000 in the completion). Please reduce the length of the messages or completion. "
        "None",
        (16384, 19591, 9591, 10000),
        id="vllm",
    ),
    pytest.param(
        "'max_tokens' or 'max_completion_tokens' is too large: 8000. This model's maximum context length "
        "is 4096 tokens and your request has 2778 input tokens (8000 > 4096 - 2778). None",
        (4096, 10778, 2778, 8000),
        id="vllm-max-tokens",
    ),
    pytest.param(
        "This model's maximum context length is 8192 tokens. However, your request has 9000 input tokens. "
        "Please reduce the length of the input messages. None",
        (8192, None, 9000, None),
        id="vllm-input",
    ),
    pytest.param(
        "The decoder prompt (length 17772) is longer than the maximum model length of 16384. Make sure "
        "that `max_model_len` is no smaller than the number of text tokens.",
        (16384, None, 17772, None),
        id="vllm-decoder",
    ),
    pytest.param(
        "This endpoint's maximum context length is 131072 tokens. However, you requested about 138956 "
        "tokens (7884 of text input, 131072 in the output). Please reduce the length of either one, or use "
        'the "middle-out" transform to compress your prompt automatically.',
        (131072, 138956, 7884, 131072),
        id="openrouter",
    ),
    pytest.param(
        "prompt is too long: 210000 tokens > 200000 maximum",
        (200000, None, 210000, None),
        id="anthropic-prompt",
    ),
    pytest.param(
        "input length and `max_tokens` exceed context limit: 198000 + 8192 > 200000, decrease input length "
        "or `max_tokens` and try again",
        (200000, 206192, 198000, 8192),
        id="anthropic-max-tokens",
    ),
    pytest.param(
        "request (9412 tokens) exceeds the available context size (8192 tokens)",
        (8192, None, 9412, None),
        id="llama.cpp",
    ),
    pytest.param(
        "Trying to keep the first 15857 tokens when context the overflows. However, the model is loaded "
        "with context length of only 4096 tokens, which is not enough. Try to load the model with a larger "
        "context length, or provide a shorter input",
        (4096, None, 15857, None),
        id="lm-studio",
    ),
    pytest.param(
        "The number of tokens to keep from the initial prompt is greater than the context length "
        "(n_keep: 10247 >= n_ctx: 4096). Try to load the model with a larger context length, or provide "
        "a shorter prompt.",
        (4096, None, 10247, None),
        id="lm-studio-n-keep",
    ),
    pytest.param(
        "Prompt contains 40000 tokens and 0 draft tokens, too large for model with 32768 maximum context "
        "length",
        (32768, None, 40000, None),
        id="mistral",
    ),
    pytest.param(
        "The input token count (1,200,000) exceeds the maximum number of tokens allowed (1,048,576).",
        (1048576, None, 1200000, None),
        id="gemini",
    ),
    pytest.param(
        "This model's maximum prompt length is 131072 but the request contains 140000 tokens.",
        (131072, None, 140000, None),
        id="xai",
    ),
    pytest.param("This model's maximum context length was exceeded", (None,) * 4, id="no-numbers"),
    pytest.param("Input too large", (None,) * 4, id="unknown"),
    pytest.param("", (None,) * 4, id="empty"),
]


def stated(error: ContextOverflowError) -> tuple[int | None, ...]:
    return tuple(getattr(error, name) for name in SIZES)


@pytest.mark.parametrize(("message", "expected"), WORDINGS)
def test_an_overflow_error_from_http_carries_the_sizes_its_wording_states(message, expected):
    body = json.dumps({"error": {"message": message, "code": "context_length_exceeded"}}).encode()
    error = error_from_http(400, {}, body, vendor="openai")
    assert isinstance(error, ContextOverflowError)
    assert stated(error) == expected
    assert error.message == (message or "openai returned HTTP 400"), "the message itself is not changed"


@pytest.mark.parametrize(("message", "expected"), WORDINGS[:4])
def test_an_in_band_or_unframed_overflow_carries_the_sizes_too(message, expected):
    events = [{"error": {"message": message, "code": "context_length_exceeded"}}]
    in_band = run(OpenAIStreamParser(), events)[0].result().error
    unframed = error_from_unframed(200, json.dumps(events[0]).encode())
    for error in (in_band, unframed):
        assert isinstance(error, ContextOverflowError) and stated(error) == expected


def test_llama_cpp_fields_win_over_its_words():
    body = {
        "error": {
            "code": 400,
            "message": "the request exceeds the available context size, try increasing it",
            "type": "exceed_context_size_error",
            "n_prompt_tokens": 4476,
            "n_ctx": 4096,
        }
    }
    error = error_from_http(400, {}, json.dumps(body).encode(), vendor="openai")
    assert isinstance(error, ContextOverflowError)
    assert stated(error) == (4096, None, 4476, None)


async def test_an_anthropic_overflow_through_the_provider_states_its_sizes():
    message = (
        "input length and `max_tokens` exceed context limit: 174167 + 64000 > 200000, decrease input length "
        "or `max_tokens` and try again"
    )
    body: Any = {"type": "error", "error": {"type": "invalid_request_error", "message": message}}
    provider = _provider(
        "anthropic", _transport([(400, {"content-type": "application/json"}, [json.dumps(body).encode()])])
    )
    result, _ = await run_stream(provider)
    assert isinstance(result.error, ContextOverflowError)
    assert stated(result.error) == (200000, 238167, 174167, 64000)


def test_other_errors_and_a_413_without_words_state_nothing():
    error = error_from_http(413, {}, b"<html><title>413 Request Entity Too Large</title></html>", vendor="x")
    assert isinstance(error, ContextOverflowError) and stated(error) == (None,) * 4
    assert overflow_sizes(None) == {} and overflow_sizes("took 5000 ms; retry in 30 s") == {}


positive = st.integers(min_value=1, max_value=10_000_000)


@given(limit=positive, prompt=positive, output=positive, commas=st.booleans())
def test_the_openai_wording_gives_back_every_number_it_was_written_with(limit, prompt, output, commas):
    shown = (lambda n: f"{n:,}") if commas else str
    message = (
        f"This model's maximum context length is {shown(limit)} tokens. However, you requested "
        f"{shown(prompt + output)} tokens ({shown(prompt)} in the messages, {shown(output)} in the completion)."
    )
    assert overflow_sizes(message) == {
        "limit_tokens": limit,
        "requested_tokens": prompt + output,
        "prompt_tokens": prompt,
        "output_tokens": output,
    }


@given(limit=positive, prompt=positive, output=positive)
def test_the_anthropic_wording_gives_back_every_number_it_was_written_with(limit, prompt, output):
    message = f"input length and `max_tokens` exceed context limit: {prompt} + {output} > {limit}, decrease"
    assert overflow_sizes(message) == {
        "limit_tokens": limit,
        "requested_tokens": prompt + output,
        "prompt_tokens": prompt,
        "output_tokens": output,
    }


@pytest.mark.parametrize(
    ("message", "limit"),
    [
        ("Range of input length should be [1, 30720]", 30720),  # Qwen DashScope, code InvalidParameter
        ("The decoder prompt (length 17772) is longer than the maximum model length of 16384.", 16384),
    ],
    ids=["dashscope", "vllm-decoder-prompt"],
)
def test_overflows_known_only_by_their_words_are_overflows_with_their_limit(message, limit):
    body = json.dumps({"error": {"message": message, "code": "InvalidParameter"}}).encode()
    error = error_from_http(400, {}, body, vendor="openai")
    assert isinstance(error, ContextOverflowError) and error.limit_tokens == limit


def test_a_range_of_max_tokens_is_a_bad_request_not_an_overflow():
    body = json.dumps(
        {"error": {"message": "Range of max_tokens should be [1, 8192]", "code": "InvalidParameter"}}
    )
    assert not isinstance(error_from_http(400, {}, body.encode(), vendor="openai"), ContextOverflowError)
