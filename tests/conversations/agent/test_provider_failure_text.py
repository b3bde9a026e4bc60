"""What a user reads when the model provider fails: the kind, the provider's own words, the ref.

The provider's message (the ``message`` of a JSON error body or of an in-band error event) is
shown for every kind — HTTP errors, in-band errors, rate limits — through one function
(``failures.provider_failure_text``): redacted, URLs cut to their host, controls out, one line,
at most 200 characters. Our own wording of a transport failure and plain-text or HTML bodies are
never shown. The case streams (SC-18, SC-20, SC-21) go through the real providers.
"""

from __future__ import annotations

import re

import pytest

from conversations.agent.failures import (
    MAX_PROVIDER_MESSAGE_CHARS,
    TurnFailure,
    TurnFailurePresenter,
    provider_failure_text,
    shown_provider_message,
)
from providers.errors import BadResponseError, InBandError, ProviderConnectionError, ServerError
from providers.openai_compat import OpenAICompatProvider
from providers.testing import openai_events, sse_body
from tests.providers._cases import load_case, make_provider, mock_transport, run_stream

present = TurnFailurePresenter().present
REF = re.compile(r" \(ref [0-9a-f]{8}\)\.$")


async def failure_of(case_id: str, *, status: int | None = None, headers=None, body: bytes | None = None):
    """The provider error the real provider raises for a case (or for a body of our own)."""
    case = load_case(case_id)
    transport = mock_transport(
        case.status if status is None else status,
        case.headers if headers is None else headers,
        [case.body if body is None else body],
    )
    result, _ = await run_stream(make_provider(case_id, transport=transport))
    assert result.error is not None
    return result.error


@pytest.mark.parametrize(
    ("case_id", "shown"),
    [
        (
            "SC-18",  # an in-band error object after partial text, code 502
            "The model provider reported an error (provider_error): Provider disconnected unexpectedly",
        ),
        (
            "SC-20",  # a JSON error body with HTTP 200, code model_unavailable
            "The model provider sent an unexpected answer (http_error): "
            "The upstream model is temporarily unavailable",
        ),
        (
            "SC-21",  # a 429 with retry-after
            "The model provider is rate limiting us (rate_limited, HTTP 429): "
            "Rate limit reached for requests. Try again in 7s",
        ),
    ],
)
async def test_the_case_errors_show_the_providers_own_words_with_kind_and_ref(case_id, shown):
    error = await failure_of(case_id)
    assert error.provider_message == load_case(case_id).expected["error"]["message"]
    failure = TurnFailure.provider(error)
    text = present(failure)
    assert text == f"{shown} (ref {failure.ref})."


async def test_a_mid_stream_in_band_error_event_shows_its_message():
    events = openai_events("Half an ans", usage=None, done=False)[:-1]
    events.append({"error": {"message": "upstream overloaded", "code": "overloaded"}})
    error = await failure_of("SC-18", body=sse_body(events))
    assert isinstance(error, InBandError) and error.provider_message == "upstream overloaded"
    text = present(TurnFailure.provider(error))
    assert text.startswith("The model provider reported an error (provider_error): upstream overloaded (ref ")


async def test_an_anthropic_error_event_shows_its_message():
    body = (
        b'event: message_start\ndata: {"type":"message_start","message":{"id":"m","role":"assistant",'
        b'"content":[],"usage":{"input_tokens":3,"output_tokens":0}}}\n\n'
        b'event: error\ndata: {"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}\n\n'
    )
    error = await failure_of("SC-22", body=body)
    assert error.provider_message == "Overloaded"
    assert provider_failure_text(error) == "The model provider reported an error (provider_error): Overloaded"


async def test_a_5xx_json_body_shows_its_message_but_an_html_or_text_body_does_not():
    headers = {"content-type": "application/json"}
    body = b'{"error": {"message": "Backend pool exhausted", "type": "server_error"}}'
    error = await failure_of("SC-21", status=502, headers=headers, body=body)
    assert provider_failure_text(error) == (
        "The model provider had a server error (server_error, HTTP 502): Backend pool exhausted"
    )
    html = b"<html><head><title>502 Bad Gateway</title></head><body>nginx</body></html>"
    error = await failure_of("SC-21", status=502, headers={"content-type": "text/html"}, body=html)
    assert error.provider_message is None
    assert provider_failure_text(error) == "The model provider had a server error (server_error, HTTP 502)"
    error = await failure_of(
        "SC-21", status=500, headers={"content-type": "text/plain"}, body=b"Traceback: x"
    )
    assert provider_failure_text(error) == "The model provider had a server error (server_error, HTTP 500)"


def test_our_own_wording_of_a_transport_failure_is_not_shown_as_the_providers():
    error = ProviderConnectionError("connect to https://api.example/v1 failed: [Errno 111]")
    assert shown_provider_message(error) == ""
    assert provider_failure_text(error) == "The model provider could not be reached (connection)"


async def test_a_key_or_url_inside_the_providers_message_is_redacted():
    headers = {"content-type": "application/json"}
    body = (
        b'{"error": {"message": "Invalid key pk-live-9f8e7d6c5b4a3210 for https://api.example/v1/chat?key=abc123 '
        b'(also sk-proj-ABCDEFGHIJKLMNOPQRST0123 via https://someone:pw@proxy.example/x)", "code": "invalid_api_key"}}'
    )
    key = "pk-live-9f8e7d6c5b4a3210"  # the configured key, echoed back by the vendor
    provider = OpenAICompatProvider(
        "http://provider.test/v1", key, "m", max_retries=0, transport=mock_transport(401, headers, [body])
    )
    error = (await run_stream(provider))[0].error
    text = present(TurnFailure.provider(error))
    for leaked in (key, "someone", "pw@", "/v1/chat", "abc123", "ABCDEFGHIJKLMNOPQRST0123", "/x"):
        assert leaked not in text, leaked
    assert "https://api.example" in text and "[redacted]" in text and REF.search(text)


def test_the_providers_message_is_one_bounded_line_without_controls():
    message = "bad\x1b[31m thing\u202e\nsecond\tline\x00 " + "x" * 500
    error = ServerError("ours", http_status=500, provider_message=message)
    shown = shown_provider_message(error)
    assert len(shown) == MAX_PROVIDER_MESSAGE_CHARS and shown.endswith("…")
    assert shown.startswith("bad [31m thing second line x")
    assert not any(ch in shown for ch in "\x1b\u202e\n\t\x00")
    error = ServerError("ours", provider_message="see https://bob:s3cret@status.example/x?token=t0k3n")
    assert shown_provider_message(error) == "see https://status.example"


def test_every_kind_shows_the_message_the_same_way():
    for error in (
        ServerError("a", http_status=503, provider_message="said so"),
        InBandError("b", http_status=200, provider_message="said so"),
        BadResponseError("c", http_status=400, provider_message="said so"),
    ):
        assert provider_failure_text(error).endswith("): said so")
