"""A context overflow of a later request says what was done, and nothing that was not (QA 6c).

The failure read "too long for the model even after compacting" also when a later request (after
tool calls) overflowed and nothing could be cut from it — nothing had been compacted. The wording
now says "even after it was shortened to fit" only when the refused request had been shortened
(``AgentResult.refused_shortened``).
"""

from __future__ import annotations

import pytest

from conversations.agent.tool_registry import ToolRegistry
from conversations.context.overflow import overflow_mid_turn_message
from providers.errors import ContextOverflowError
from providers.testing import ScriptedProvider, script_text
from tests.conversations.context.test_overflow_mid_turn import (
    DUMP,
    REF,
    THREE_DUMPS,
    WindowedProvider,
    begin,
    calls,
    stored,
    terminal,
    tool,
)

pytestmark = [pytest.mark.django_db(transaction=True)]

SHORTENED = (
    "The conversation is too long for the model: the model refused this turn's input as over its context "
    "window, even after it was shortened to fit. Send a shorter message, or start a new dialog with /new"
)
AS_IT_WAS = (
    "The conversation is too long for the model: the model refused this turn's input as over its context "
    "window. Send a shorter message, or start a new dialog with /new"
)


async def tiny(arguments: dict) -> str:
    return "ok"


def overflow() -> ContextOverflowError:
    return ContextOverflowError(
        "maximum context length exceeded", http_status=400, provider_code="context_length"
    )


def test_the_mid_turn_message_claims_shortening_only_when_the_request_was_shortened():
    assert overflow_mid_turn_message(shortened=True) == SHORTENED + "."
    assert overflow_mid_turn_message(shortened=False) == AS_IT_WAS + "."
    assert "compacting" not in overflow_mid_turn_message(shortened=False)


@pytest.fixture
def window_8000(settings):
    settings.PICOBOT = settings.PICOBOT.replace(llm_context_window=8000, auto_title_after=0)


async def test_a_later_request_with_nothing_to_cut_fails_without_claiming_a_compaction(
    connect, start_worker, window_8000
):
    # The tool result is tiny: the fitted request is the turn's messages as they are, and the hard
    # fit cuts nothing either, so the request is not sent again.
    provider = ScriptedProvider([calls(("t1", "tiny")), overflow(), overflow()])
    client, _, _ = await begin(connect, start_worker, provider, tools=ToolRegistry([tool("tiny", tiny)]))

    turn = await terminal(client)

    assert len(provider.requests) == 2, "nothing could be cut: no second try"
    assert turn["status"] == "failed"
    [ref] = REF.findall(turn["error"])
    assert turn["error"] == f"{AS_IT_WAS} (ref {ref})."
    state = await stored()
    assert [r[0] for r in state["rows"]] == ["user", "assistant", "tool"]


async def test_a_later_request_refused_after_it_was_shortened_says_so(connect, start_worker, window_8000):
    provider = WindowedProvider([THREE_DUMPS, script_text("never")], window=2000)
    client, _, _ = await begin(connect, start_worker, provider, tools=DUMP)

    turn = await terminal(client)

    assert len(provider.refused) == 2, "the fitted request and one harder retry"
    [ref] = REF.findall(turn["error"])
    assert turn["error"] == f"{SHORTENED} (ref {ref})."
