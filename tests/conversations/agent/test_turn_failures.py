"""Typed turn failures, their presenter and redaction (seed 000 §13), and the agent loop's cancel and
stale-state rules (seed 003 §14.1, §8.3) — pure, no database."""

from __future__ import annotations

import asyncio
import logging
import re

import pytest

from conversations.agent.failures import (
    DEFAULT_MESSAGES,
    TurnFailedError,
    TurnFailure,
    TurnFailureKind,
    TurnFailurePresenter,
    log_failure,
    provider_failure_lead,
)
from conversations.agent.log_safety import configured_secrets, one_line
from conversations.agent.loop import AgentLoop
from conversations.agent.tool_registry import Tool, ToolFatalError, ToolRegistry
from delivery.events import TextDelta
from delivery.snapshot import TurnStatus
from delivery.turn import TurnController
from providers.chunks import ReasoningDelta as ReasoningChunk
from providers.chunks import TextDelta as TextChunk
from providers.errors import (
    AuthenticationError,
    BadResponseError,
    OverloadedError,
    ProviderError,
    RateLimitedError,
    RequestBlockedError,
    ServerError,
)
from providers.messages import Message
from providers.redaction import redact
from providers.testing import ScriptedProvider, script_text, script_tool_call

REF_AT_END = re.compile(r" \(ref [0-9a-f]{8}\)\.$")
INPUT = [Message.system("You are PicoBot."), Message.user("Hi")]
present = TurnFailurePresenter().present


@pytest.mark.parametrize(
    ("raw", "line"),
    [
        ("a\nb\rc\td", "a\\nb\\rc\\td"),
        ("\x1b[31mred\x1b[0m", "\\u001b[31mred\\u001b[0m"),  # ANSI colours neutralised
        ("\u202eLOOKS FINE\u202c", "\\u202eLOOKS FINE\\u202c"),  # bidi override
        ("\u2066iso\u2069 \u2067x\u2068", "\\u2066iso\\u2069 \\u2067x\\u2068"),  # bidi isolates
        ("nul\x00 del\x7f c1\x9b bell\x07 ls\u2028", "nul\\u0000 del\\u007f c1\\u009b bell\\u0007 ls\\u2028"),
        ("plain 中文 text", "plain 中文 text"),
    ],
)
def test_one_line_neutralises_controls_ansi_and_bidi_characters(raw, line):
    assert one_line(raw) == line


def test_a_provider_message_with_ansi_and_bidi_is_shown_and_logged_inert():
    error = BadResponseError(
        "\u202eLOOKS FINE\u202c \x1b[31mred\x1b[0m Bearer\tabcdefghijkl1234",
        http_status=400,
        provider_code="x",
        provider_message="\u202eLOOKS FINE\u202c \x1b[31mred\x1b[0m Bearer\tabcdefghijkl1234",
    )
    failure = TurnFailure.provider(error)
    text = present(failure)

    for shown in (text, failure.detail):
        assert not any(ch in shown for ch in ("\x1b", "\u202e", "\u202c", "\t", "\n"))
        assert "abcdefghijkl1234" not in shown


# -- TurnFailure and the presenter --------------------------------------------------------------


def test_a_5xx_provider_failure_names_kind_and_status_and_ends_with_its_ref():
    failure = TurnFailure.provider(
        OverloadedError("upstream overloaded", http_status=503, provider_code="overloaded")
    )
    text = present(failure)
    assert text == f"The model provider is overloaded (overloaded, HTTP 503) (ref {failure.ref})."
    assert text.endswith(f" (ref {failure.ref}).") and REF_AT_END.search(text)
    assert failure.kind is TurnFailureKind.PROVIDER
    assert "provider_code='overloaded'" in failure.detail and "OverloadedError" in failure.detail


def test_provider_failure_lead_keeps_server_error_and_overloaded_apart():
    assert (
        provider_failure_lead(ServerError("x", http_status=502))
        == "The model provider had a server error (server_error, HTTP 502)"
    )
    assert provider_failure_lead(OverloadedError("x", http_status=529)).startswith(
        "The model provider is overloaded"
    )
    assert (
        provider_failure_lead(ProviderError("x")) == "The model provider reported an error (provider_error)"
    )


def test_a_blocked_request_says_so_with_its_reason():
    text = present(
        TurnFailure.provider(RequestBlockedError("passwords are not sent to the model", hook="no_passwords"))
    )
    assert text.startswith(
        "The request was blocked before reaching the model: passwords are not sent to the model"
    )
    assert REF_AT_END.search(text)


def test_a_key_inside_a_provider_message_never_reaches_the_user_or_the_log():
    error = AuthenticationError(
        "Incorrect API key provided: sk-live-0123456789abcdef",
        http_status=401,
        provider_code="invalid_api_key",
        provider_message="Incorrect API key provided: sk-live-0123456789abcdef",
    )
    error.__cause__ = RuntimeError(
        "POST https://api.example/v1?key=leaky-key-123 with Bearer abcdefghijklmnop"
    )
    failure = TurnFailure.provider(error)
    text = present(failure)
    assert "0123456789abcdef" not in text and "sk-[redacted]" in text
    for leaked in ("0123456789abcdef", "leaky-key-123", "abcdefghijklmnop"):
        assert leaked not in failure.detail
    assert "RuntimeError" in failure.detail, "the cause chain is kept for the log"


@pytest.mark.parametrize("kind", list(TurnFailureKind))
def test_every_kind_has_a_short_default_message_with_the_ref(kind):
    failure = TurnFailure.of(kind)
    text = present(failure)
    assert text == f"{DEFAULT_MESSAGES[kind]} (ref {failure.ref})."
    assert len(text) < 200


def test_an_exception_stays_in_the_detail_and_out_of_the_message():
    try:
        raise RuntimeError("database at postgres://app:pa55word@db/picobot is gone")
    except RuntimeError as exc:
        failure = TurnFailure.from_exception(TurnFailureKind.INTERNAL, exc)
    assert present(failure) == f"Internal error (ref {failure.ref})."
    assert "Traceback" in failure.detail and "is gone" in failure.detail
    assert "pa55word" not in failure.detail


def test_the_persistence_failure_says_the_preview_was_not_saved_and_gets_a_notice():
    failure = TurnFailure.of(TurnFailureKind.TURN_PERSISTENCE, detail="OperationalError: disk I/O error")
    presenter = TurnFailurePresenter()
    assert "could not be saved" in presenter.present(failure)
    assert "not in the history" in presenter.present(failure)
    notice = presenter.notice(failure)
    assert notice is not None and "not saved" in notice and f"(ref {failure.ref})" in notice
    assert "disk I/O" not in notice
    assert presenter.notice(TurnFailure.of(TurnFailureKind.PROVIDER)) is None


def test_long_user_messages_are_bounded_and_one_line():
    failure = TurnFailure.of(TurnFailureKind.CONTEXT_PREPARATION, user_message="too long\n" + "x" * 5000)
    text = present(failure)
    assert "\n" not in text and len(text) < 700 and REF_AT_END.search(text)


def test_turn_failed_error_carries_its_failure():
    failure = TurnFailure.of(TurnFailureKind.AGENT_CREATION)
    assert TurnFailedError(failure).failure is failure


def test_the_configured_api_key_is_redacted_from_details(settings):
    settings.PICOBOT = settings.PICOBOT.replace(llm_api_key="custom-configured-key-777")
    failure = TurnFailure.of(TurnFailureKind.PROVIDER, detail="echo: custom-configured-key-777")
    assert failure.detail == "echo: [redacted]"


def test_log_failure_writes_kind_ref_and_redacted_detail(caplog):
    logger = logging.getLogger("test.turn_failures")
    failure = TurnFailure.of(
        TurnFailureKind.TURN_PERSISTENCE, detail="commit failed; dsn password=opensesame"
    )
    with caplog.at_level(logging.WARNING, logger="test.turn_failures"):
        log_failure(logger, "turn-1", failure)
        log_failure(logger, "turn-2", TurnFailure.of(TurnFailureKind.PROVIDER, detail="503"))
    first, second = caplog.records
    assert first.levelno == logging.ERROR and second.levelno == logging.WARNING
    assert "turn-1" in first.getMessage() and failure.ref in first.getMessage()
    assert "turn_persistence" in first.getMessage() and "opensesame" not in first.getMessage()


def _own(cls, message, **kwargs):
    """An error as the provider layer builds it from a structured error: its message is the
    provider's own (``provider_message``)."""
    return cls(message, provider_message=message, **kwargs)


@pytest.mark.parametrize(
    ("error", "shown"),
    [
        pytest.param(
            _own(
                RateLimitedError, "Rate limit reached", http_status=429, provider_code="rate_limit_exceeded"
            ),
            "Rate limit reached",
            id="structured-429-shown",
        ),
        pytest.param(
            _own(
                AuthenticationError,
                "Incorrect API key provided: sk-live-0123456789abcdef",
                http_status=401,
                provider_code="invalid_api_key",
            ),
            "Incorrect API key provided: sk-[redacted]",
            id="structured-401-shown-redacted",
        ),
        pytest.param(
            _own(BadResponseError, "x" * 201, http_status=400, provider_code="invalid_request_error"),
            "x" * 199 + "…",
            id="too-long-is-cut",
        ),
        pytest.param(
            BadResponseError("Request Entity Too Large", http_status=404), None, id="unstructured-4xx"
        ),
        pytest.param(
            _own(ServerError, "The server had an error", http_status=500, provider_code="server_error"),
            "The server had an error",
            id="structured-5xx-shown",
        ),
        pytest.param(
            ServerError("HTTP 502 with an HTML body: Bad Gateway", http_status=502), None, id="html-5xx"
        ),
        pytest.param(_own(BadResponseError, "weird 200", http_status=200), "weird 200", id="200-json-error"),
    ],
)
def test_the_providers_own_message_is_shown_whatever_the_kind(error, shown):
    failure = TurnFailure.provider(error)
    text = present(failure)
    if shown is None:
        assert (
            text == f"{text.split(' (ref ')[0]} (ref {failure.ref})." and ":" not in text.split(" (ref ")[0]
        )
        assert error.message not in text
    else:
        assert text.endswith(f": {shown} (ref {failure.ref}).")


# -- the agent loop: stale state (seed 003 §8.3) -----------------------------------------------


def clock_tools(log: list[str] | None = None, flip: dict | None = None) -> ToolRegistry:
    async def clock(arguments: dict) -> str:
        if log is not None:
            log.append("tool ran")
        if flip is not None:
            flip["current"] = False  # the owner loses the dialog while the tool runs
        return "12:00"

    return ToolRegistry([Tool("clock", "time", {"type": "object", "properties": {}}, clock)])


async def test_a_stale_owner_never_calls_the_provider():
    provider = ScriptedProvider([script_text("never")])
    events: list = []
    agent = AgentLoop(provider, clock_tools(), events.append, is_current=lambda: False)
    result = await agent.run(INPUT)
    assert result.stale and provider.requests == [] and events == [] and result.messages == []


async def test_the_loop_stops_after_a_tool_batch_when_the_owner_lost_the_dialog():
    flip = {"current": True}
    provider = ScriptedProvider([script_tool_call("call_1", "clock", {}), script_text("never asked")])
    agent = AgentLoop(provider, clock_tools(flip=flip), lambda e: None, is_current=lambda: flip["current"])
    result = await agent.run(INPUT)
    assert result.stale
    assert len(provider.requests) == 1, "no provider call after the stale tool batch"
    assert [m.message.role for m in result.messages] == ["assistant", "tool"]


async def test_a_current_owner_runs_every_iteration():
    provider = ScriptedProvider([script_tool_call("call_1", "clock", {}), script_text("It is noon.")])
    agent = AgentLoop(provider, clock_tools(), lambda e: None, is_current=lambda: True)
    result = await agent.run(INPUT)
    assert not result.stale and result.final_text == "It is noon."


# -- the agent loop: cancel and partials (seed 003 §14.1, §14.2) ---------------------------------


class StubbornProvider(ScriptedProvider):
    """Shows "Shown", then ignores the first cancellation and keeps streaming late text."""

    def __init__(self) -> None:
        super().__init__([])
        self.silent = asyncio.Event()
        self.log: list[str] = []

    async def _stream(self, request):
        self.requests.append(request)
        yield TextChunk("Shown")
        self.silent.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            self.log.append("cancel swallowed")
        for late in (" LATE", " MORE"):
            self.log.append(f"yielded{late}")
            yield TextChunk(late)


async def test_late_chunks_after_a_cancel_are_dropped_and_the_cancel_goes_on():
    provider = StubbornProvider()
    controller = TurnController("t1", "cli_chat:1:d1", "m1")
    agent = AgentLoop(provider, ToolRegistry([]), controller.apply)
    task = asyncio.ensure_future(agent.run(INPUT))
    await asyncio.wait_for(provider.silent.wait(), 5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert provider.log == ["cancel swallowed", "yielded LATE"], "the first late chunk ended the stream"
    assert controller.snapshot().answer_text() == "Shown"
    assert agent.partial_message().message.text == "Shown"


async def test_events_after_the_turn_is_terminal_are_dropped_by_the_controller():
    controller = TurnController("t1", "cli_chat:1:d1", "m1")
    controller.apply(TextDelta(iteration=0, delta="Shown"))
    controller.cancel("stopped")
    revision = controller.revision
    assert controller.apply(TextDelta(iteration=0, delta=" late")) is False
    assert controller.revision == revision and controller.status is TurnStatus.CANCELLED
    assert controller.snapshot().answer_text() == "Shown"


async def test_reasoning_alone_is_no_partial_answer():
    error = OverloadedError("gone", http_status=503)
    provider = ScriptedProvider([[ReasoningChunk("Let me think"), TextChunk("\n\n"), error]])
    agent = AgentLoop(provider, ToolRegistry([]), lambda e: None)
    result = await agent.run(INPUT)
    assert result.error is error and result.partial is None


# -- QA 6b: redaction that neither over- nor under-reaches, one-line log details (N3, N4, N5) ---


@pytest.mark.parametrize(
    "placeholder", ["ollama", "EMPTY", "none", "test", "dummy", "lm-studio", "not-needed"]
)
def test_a_placeholder_api_key_does_not_redact_ordinary_words(settings, placeholder):
    settings.PICOBOT = settings.PICOBOT.replace(llm_api_key=placeholder)
    text = f"model '{placeholder}/llama3' not found; none of the test models match"

    assert redact(text, configured_secrets()) == text
    assert TurnFailure.of(TurnFailureKind.PROVIDER, detail=text).detail == text


FORGED = "x\n2026-01-01 00:00:00 ERROR fake entry \x1b[31m\u202e"


@pytest.mark.parametrize(
    "failure",
    [
        pytest.param(
            TurnFailure.from_exception(TurnFailureKind.TOOL, ToolFatalError(FORGED), traceback=False),
            id="tool",
        ),
        pytest.param(TurnFailure.of(TurnFailureKind.TURN_PERSISTENCE, detail=FORGED), id="storage"),
        pytest.param(TurnFailure.of(TurnFailureKind.INTERNAL, detail=FORGED + "\ud800"), id="lone-surrogate"),
    ],
)
def test_every_logged_failure_detail_is_one_inert_line(caplog, failure):
    logger = logging.getLogger("test.turn_failures")
    with caplog.at_level(logging.WARNING, logger="test.turn_failures"):
        log_failure(logger, "turn-1", failure)

    [line] = [r.getMessage() for r in caplog.records]
    assert "\n" not in line and "\x1b" not in line and "\u202e" not in line
    assert "x\\n2026-01-01 00:00:00 ERROR fake entry \\u001b[31m\\u202e" in line
    line.encode("utf-8")


def test_a_logged_traceback_is_one_bounded_line_that_keeps_its_head_and_tail(caplog):
    try:
        raise ToolFatalError(FORGED + "y" * 20_000)
    except ToolFatalError as exc:
        failure = TurnFailure.from_exception(TurnFailureKind.INTERNAL, exc)
    logger = logging.getLogger("test.turn_failures")
    with caplog.at_level(logging.WARNING, logger="test.turn_failures"):
        log_failure(logger, "turn-1", failure)

    [line] = [r.getMessage() for r in caplog.records]
    assert "\n" not in line and len(line) < 8200
    assert "Traceback (most recent call last):\\n" in line and line.endswith("y" * 100)


def test_configured_secrets_come_from_the_registered_sources_a_failing_one_gives_nothing(
    settings, monkeypatch
):
    from conversations.agent import log_safety

    settings.PICOBOT = settings.PICOBOT.replace(llm_api_key="sk-live-key-123456")
    assert "sk-live-key-123456" in configured_secrets(), "the app registers its settings at start-up"

    def broken() -> list[str]:
        raise RuntimeError("settings are not configured")

    monkeypatch.setattr(log_safety, "_secret_sources", [broken, lambda: ["", "extra-secret-42", None]])
    assert configured_secrets() == ("extra-secret-42",)
    monkeypatch.setattr(log_safety, "_secret_sources", [])
    assert configured_secrets() == (), "a pure unit test without Django knows no secrets"
