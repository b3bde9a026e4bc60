"""A summary or a title is taken only from an answer the model ended itself (QA 6b, B5).

Compaction refused only ``length``/``max_tokens``; a summary cut short by a content filter, a
context-window stop, a refusal or a paused turn replaced the history it stood for. Now an
allow-list of normal finish reasons (``AssistantResponse.finished_normally``) decides, for
compaction and for titles alike; no finish reason at all counts as not finished.
"""

from __future__ import annotations

import logging

import pytest
from channels.db import database_sync_to_async

from conversations.context.compaction_service import CompactionError, summarise
from conversations.models import Dialog
from conversations.runtime.supervisor import TaskSupervisor
from conversations.runtime.titles import TitleService
from providers.chunks import Done, TextDelta
from providers.messages import Message
from providers.testing import ScriptedProvider
from providers.types import AssistantResponse, ProviderRequest
from tests.conversations.titles.test_titles import seed_dialog

NOT_NORMAL = [
    "length",
    "MAX_TOKENS",
    "content_filter",
    "model_context_window_exceeded",
    "refusal",
    "pause_turn",
    "tool_calls",
    "tool_use",
    "error",
    "something_new",
]
NORMAL = ["stop", "STOP", "end_turn", "stop_sequence", None]  # None: a complete stream naming no reason


def response(finish_reason: str | None) -> AssistantResponse:
    return AssistantResponse("text", None, [], None, finish_reason, None)


@pytest.mark.parametrize("finish_reason", NORMAL)
def test_a_normal_stop_is_finished_normally(finish_reason):
    assert response(finish_reason).finished_normally is True


@pytest.mark.parametrize("finish_reason", NOT_NORMAL)
def test_anything_else_is_not_finished_normally(finish_reason):
    assert response(finish_reason).finished_normally is False


def answer(text: str, finish_reason: str | None) -> list:
    return [TextDelta(text), Done(finish_reason)]


@pytest.mark.parametrize("finish_reason", NOT_NORMAL)
async def test_a_summary_that_did_not_finish_normally_is_refused(finish_reason, caplog):
    provider = ScriptedProvider([answer("The user asked about the weather and the", finish_reason)])
    request = ProviderRequest(messages=[Message.user("x")])

    with (
        caplog.at_level(logging.WARNING, logger="conversations.context.compaction_service"),
        pytest.raises(CompactionError) as raised,
    ):
        await summarise("d", provider, request, 5)

    cut = (finish_reason or "").lower() in ("length", "max_tokens")
    wording = "was cut off at its output limit" if cut else "did not finish normally"
    assert str(raised.value).startswith(f"The model's summary {wording}; nothing was changed (ref ")
    assert raised.value.ref in caplog.text and "did not finish normally" in caplog.text


@pytest.mark.parametrize("finish_reason", NORMAL)
async def test_a_summary_that_finished_normally_is_used(finish_reason):
    provider = ScriptedProvider([answer("The user asked about the weather.", finish_reason)])

    summary = await summarise("d", provider, ProviderRequest(messages=[Message.user("x")]), 5)

    assert summary == "The user asked about the weather."


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    ("finish_reason", "titled"), [("content_filter", False), (None, True), ("stop", True)]
)
async def test_a_title_is_taken_only_from_an_answer_that_finished_normally(finish_reason, titled, caplog):
    dialog = await database_sync_to_async(seed_dialog)("alice", 2)
    provider = ScriptedProvider([answer("Autumn Trip", finish_reason)])
    supervisor = TaskSupervisor("test")
    service = TitleService(provider, supervisor, after_n=2, on_first=False, timeout=5)

    with caplog.at_level(logging.WARNING, logger="conversations.runtime.titles"):
        service.schedule(dialog.id)
        assert await supervisor.drain(timeout=5)
    await supervisor.close(timeout=1)

    final = await database_sync_to_async(Dialog.objects.get)(pk=dialog.pk)
    assert (final.title == "Autumn Trip") is titled
    assert final.title_is_default is not titled
    assert ("did not finish normally" in caplog.text) is not titled
