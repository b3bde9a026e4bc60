"""Overflow sized from the provider (issue 17, Must show 5), whole turns over real HTTP.

The upstream is an OpenAI-compatible model whose real context window (``REAL_WINDOW`` tokens, four
request-body bytes a token) is far smaller than the configured one (128,000): it measures every
request it receives and refuses one over its window with HTTP 400 and the real wording, stating
its window, the request's input and its ``max_tokens`` (vLLM / OpenAI), or only the input
(Anthropic's "prompt is too long"). The recovery is sized from what was refused, never from the
configured window: the first request of a long dialog and a later request after a large tool
result each recover once and complete; a refusal of input + ``max_tokens`` is retried with the
same input and a smaller ``max_tokens``; the learned window sizes the next turn, which is not
refused; a second refusal still fails the turn clearly.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import pytest
from channels.db import database_sync_to_async

from conversations.agent.overflow_sizing import margin_tokens
from conversations.agent.tool_registry import ToolRegistry
from conversations.context.turn_input import TOO_LONG
from conversations.models import Dialog, Message
from providers.openai_compat import OpenAICompatProvider
from providers.testing import LocalSSEServer, RecordedRequest, SSEResponse, openai_events, sse_body
from tests.conversations.conftest import make_token
from tests.conversations.context.test_overflow_mid_turn import tool
from tests.conversations.context.test_turn_input import SUMMARY, WindowedUpstream, run_one, seed_chat
from tests.conversations.streams import text_pieces

pytestmark = [pytest.mark.django_db(transaction=True)]

REAL_WINDOW = 6000  # tokens the model really takes; PICOBOT_LLM_CONTEXT_WINDOW says 128,000
BYTES_PER_TOKEN = 4
MAX_TOKENS = 4096  # the preset's output budget (PICOBOT_LLM_MAX_TOKENS), sent with every request


@dataclass
class Seen:
    """One request the upstream received: its measured input, its ``max_tokens``, whether it was
    refused, and its messages."""

    prompt: int
    max_tokens: int | None
    refused: bool
    messages: list


class RealWindowUpstream:
    """A model with a real window of ``REAL_WINDOW`` tokens; ``answers`` are the turn requests'
    SSE bodies in order (summary requests get ``SUMMARY``).

    Args:
        counts_output: refuse input + ``max_tokens`` over the window (vLLM, OpenAI); False
            refuses only an input over it (Anthropic's "prompt is too long").
    """

    def __init__(self, answers: list[bytes], *, counts_output: bool = True) -> None:
        self.answers = list(answers)
        self.counts_output = counts_output
        self.turns: list[Seen] = []
        self.summaries: list[Seen] = []

    def __call__(self, request: RecordedRequest) -> SSEResponse:
        body = request.json()
        prompt = len(request.body) // BYTES_PER_TOKEN
        output = body.get("max_tokens")
        summary = WindowedUpstream.is_summary(request)
        needed = prompt + (output or 0 if self.counts_output else 0)
        seen = Seen(prompt, output, needed > REAL_WINDOW, body["messages"])
        (self.summaries if summary else self.turns).append(seen)
        if seen.refused:
            return self.refusal(prompt, output)
        if summary:
            return SSEResponse(pieces=text_pieces(SUMMARY))
        return SSEResponse(pieces=[self.answers.pop(0)])

    def refusal(self, prompt: int, output: int | None) -> SSEResponse:
        if not self.counts_output:
            message = f"prompt is too long: {prompt} tokens > {REAL_WINDOW} maximum"
        elif output:
            message = (
                f"This model's maximum context length is {REAL_WINDOW} tokens. However, you requested "
                f"{prompt + output} tokens ({prompt} in the messages, {output} in the completion). Please "
                "reduce the length of the messages or completion."
            )
        else:
            message = (
                f"This model's maximum context length is {REAL_WINDOW} tokens. However, your messages "
                f"resulted in {prompt} tokens. Please reduce the length of the messages."
            )
        body = {
            "error": {"message": message, "type": "invalid_request_error", "code": "context_length_exceeded"}
        }
        return SSEResponse(
            400, {"content-type": "application/json"}, [json.dumps(body).encode()], chunked=False
        )

    @property
    def refused(self) -> list[Seen]:
        return [seen for seen in self.turns + self.summaries if seen.refused]


@database_sync_to_async
def append_chat(session_id: str, cycles: int, chars: int) -> None:
    """``cycles`` more user/assistant pairs of ``chars`` characters after the dialog's last row."""
    dialog = Dialog.objects.get(pk=session_id)
    last = Message.objects.filter(dialog=dialog).order_by("-seq").values_list("seq", flat=True).first() or 0
    rows = []
    for n in range(cycles):
        rows.append(
            Message(dialog=dialog, seq=last + 2 * n + 1, role="user", content=f"more {n}: " + "m" * chars)
        )
        rows.append(
            Message(dialog=dialog, seq=last + 2 * n + 2, role="assistant", content=f"so {n}: " + "s" * chars)
        )
    Message.objects.bulk_create(rows)
    total = last + len(rows)
    Dialog.objects.filter(pk=session_id).update(history_revision=total, total_message_count=total)


@database_sync_to_async
def stored(session_id: str) -> dict:
    """The dialog's rows (role, content) after any seeded ones (``seq`` > 60 or not seeded) and summary."""
    dialog = Dialog.objects.get(pk=session_id)
    rows = Message.objects.filter(dialog=dialog).exclude(content__regex=r"^(topic|about) \d+: ")
    return {"rows": list(rows.order_by("seq").values_list("role", "content")), "summary": dialog.summary}


def answer(text: str) -> bytes:
    return sse_body(openai_events(text))


def calls(*call_ids: str) -> bytes:
    """One response calling the tool ``read`` once per id."""
    return sse_body(openai_events(tool_calls=[(call_id, "read", "{}") for call_id in call_ids]))


def provider_for(server: LocalSSEServer) -> OpenAICompatProvider:
    return OpenAICompatProvider(
        server.base_url, "sk-test", "test-model", max_tokens=MAX_TOKENS, max_retries=0
    )


@pytest.fixture
def configured(settings):
    """The configured window (128,000) is far larger than the model's real one (6,000)."""
    settings.PICOBOT = settings.PICOBOT.replace(
        llm_context_window=128_000, llm_max_tokens=MAX_TOKENS, auto_title_after=0
    )


async def open_chat(connect):
    client = await connect(await make_token())
    session_id = (await client.until("ready"))["active_session_id"]
    return client, session_id


async def test_a_long_dialogs_first_request_refused_by_a_smaller_real_window_recovers_once(
    connect, start_worker, configured
):
    upstream = RealWindowUpstream([answer("Here is the answer.")])
    async with LocalSSEServer(handler=upstream) as server:
        client, session_id = await open_chat(connect)
        await seed_chat(session_id, 30, 1500)  # ≈ 23,000 of the model's tokens
        await start_worker(provider_for(server))
        turn = await run_one(client, "What did we cover?")

    assert turn["status"] == "completed", turn["error"]
    assert [b["text"] for b in turn["blocks"] if b["type"] == "assistant"] == ["Here is the answer."]
    first, retried = upstream.turns
    assert first.refused and first.prompt > REAL_WINDOW and not retried.refused
    assert upstream.refused == [first], "one refusal, recovered once"
    assert retried.prompt + (retried.max_tokens or MAX_TOKENS) <= REAL_WINDOW
    state = await stored(session_id)
    assert state["rows"] == [("user", "What did we cover?"), ("assistant", "Here is the answer.")]
    assert state["summary"] == SUMMARY


async def test_a_later_request_after_a_large_tool_result_refused_by_a_smaller_real_window_recovers_once(
    connect, start_worker, configured
):
    # Regression: the configured window (128,000) holds three results of 16,000 characters (the
    # tool result limit; ≈ 12,000 of the model's tokens together), so the fitted request went out
    # whole, was refused, and "fitting harder" to half the configured budget (51,200) cut nothing
    # either: the turn failed. Now it is refitted to the stated window.
    big = "R" * 16_000

    async def read(arguments: dict) -> str:
        return big

    upstream = RealWindowUpstream([calls("r1", "r2", "r3"), answer("Read it.")])
    async with LocalSSEServer(handler=upstream) as server:
        client, session_id = await open_chat(connect)
        await start_worker(provider_for(server), tools=ToolRegistry([tool("read", read)]))
        turn = await run_one(client, "Read the file.")

    assert turn["status"] == "completed", turn["error"]
    assert [b["text"] for b in turn["blocks"] if b["type"] == "assistant"] == ["Read it."]
    first, refused, retried = upstream.turns
    assert not first.refused and refused.refused and not retried.refused
    assert upstream.refused == [refused], "one refusal, recovered once"
    assert retried.prompt + (retried.max_tokens or MAX_TOKENS) <= REAL_WINDOW
    assert refused.prompt + MAX_TOKENS > refused.prompt > REAL_WINDOW, "the input alone was over the window"
    results = [m["content"] for m in retried.messages if m["role"] == "tool"]
    assert len(results) == 3 and all(r.startswith("RRR") and len(r) < len(big) for r in results)
    state = await stored(session_id)
    assert state["rows"] == [
        ("user", "Read the file."),
        ("assistant", ""),
        *[("tool", big)] * 3,  # the stored history keeps the results whole
        ("assistant", "Read it."),
    ]


async def test_input_plus_max_tokens_refused_is_retried_with_a_smaller_output_budget(
    connect, start_worker, configured
):
    upstream = RealWindowUpstream([answer("Short answer.")])
    async with LocalSSEServer(handler=upstream) as server:
        client, session_id = await open_chat(connect)
        await seed_chat(session_id, 3, 1500)  # ≈ 2,500 tokens: fits, but not with 4,096 to answer
        await start_worker(provider_for(server))
        turn = await run_one(client, "Sum it up.")

    assert turn["status"] == "completed", turn["error"]
    first, retried = upstream.turns
    assert first.refused and first.prompt < REAL_WINDOW < first.prompt + MAX_TOKENS
    assert first.max_tokens == MAX_TOKENS
    assert retried.messages == first.messages, "the same input"
    assert retried.max_tokens == REAL_WINDOW - first.prompt - margin_tokens(REAL_WINDOW)
    assert upstream.summaries == [], "nothing was compacted"


async def test_the_learned_window_sizes_the_next_turn_which_is_not_refused(connect, start_worker, configured):
    upstream = RealWindowUpstream([answer("First answer."), answer("Second answer.")])
    async with LocalSSEServer(handler=upstream) as server:
        client, session_id = await open_chat(connect)
        await seed_chat(session_id, 3, 1500)
        await start_worker(provider_for(server))
        first = await run_one(client, "Sum it up.")
        second = await run_one(client, "And once more, please.")

    assert first["status"] == second["status"] == "completed", (first["error"], second["error"])
    refused, retried, next_turn = upstream.turns
    assert upstream.refused == [refused], "the second turn was sized from the learned window"
    assert next_turn.prompt > retried.prompt, "it is larger than the retried request was"
    assert next_turn.max_tokens is not None and next_turn.max_tokens < MAX_TOKENS
    assert next_turn.prompt + next_turn.max_tokens <= REAL_WINDOW


async def test_a_prompt_refused_without_an_output_budget_learns_the_window_for_the_next_dialog_turns(
    connect, start_worker, configured
):
    # Anthropic's wording states only the input and the window: the input is refitted to it, and the
    # next turn's input is fitted to the learned window from the start (no refusal).
    upstream = RealWindowUpstream([answer("One."), answer("Two.")], counts_output=False)
    async with LocalSSEServer(handler=upstream) as server:
        client, session_id = await open_chat(connect)
        await seed_chat(session_id, 30, 1500)
        await start_worker(provider_for(server))
        first = await run_one(client, "What did we cover?")
        await append_chat(session_id, 12, 1500)  # ≈ 9,000 tokens more: over the real window again
        second = await run_one(client, "Anything else?")

    assert first["status"] == second["status"] == "completed", (first["error"], second["error"])
    refused, retried, next_turn = upstream.turns
    assert upstream.refused == [refused], "the second turn was fitted to the learned window up front"
    assert retried.prompt <= REAL_WINDOW and next_turn.prompt <= REAL_WINDOW
    assert len(upstream.summaries) == 2, "each turn compacted once: after the refusal, then up front"


async def test_a_second_refusal_after_a_smaller_output_budget_fails_the_turn_clearly(
    connect, start_worker, configured
):
    upstream = RealWindowUpstream([answer("never")])
    refuse = upstream.refusal

    def always(request: RecordedRequest) -> SSEResponse:
        upstream(request)
        body = request.json()
        return refuse(len(request.body) // BYTES_PER_TOKEN, body.get("max_tokens") or MAX_TOKENS)

    async with LocalSSEServer(handler=always) as server:
        client, session_id = await open_chat(connect)
        await seed_chat(session_id, 3, 1500)
        await start_worker(provider_for(server))
        turn = await run_one(client, "Sum it up.")

    assert turn["status"] == "failed"
    assert turn["error"].startswith(
        f"{TOO_LONG}: the model refused its input again, also with a smaller output budget."
    )
    assert len(upstream.turns) == 2, "one retry, never a loop"
    state = await stored(session_id)
    assert state["rows"] == [("user", "Sum it up.")]
