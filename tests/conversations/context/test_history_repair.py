"""A damaged tool history still gets answers (DESIGN §3, §6).

A crash (or an old bug) can leave a dialog whose history breaks the tool-call pairing providers
insist on: an assistant tool call with no result, a tool result with no call, or a result that a
user row separated from its call. ``conversations.context.history.repair_tool_pairs`` mends the *request*
(the stored history stays as it is). Here the turn runs through the whole chain — WebSocket
consumer, agent worker, executor, a real ``OpenAICompatProvider`` over HTTP — against a local
OpenAI-compatible server that answers HTTP 400, like OpenAI does, to any request whose pairing is
broken.
"""

from __future__ import annotations

import json

import pytest
from channels.db import database_sync_to_async

from conversations.context.history import INTERRUPTED_RESULT, row_to_message
from conversations.models import Dialog, Message
from conversations.storage import message_to_history_row
from providers.errors import ProviderError
from providers.messages import RUNTIME_CONTEXT_MARKER
from providers.messages import Message as ProviderMessage
from providers.openai_compat import OpenAICompatProvider
from providers.testing import LocalSSEServer, RecordedRequest, SSEResponse
from providers.types import ProviderRequest
from tests.conversations.conftest import make_token
from tests.conversations.streams import text_pieces

pytestmark = [pytest.mark.django_db(transaction=True)]

ANSWER = "All good."
NEW_MESSAGE = "Are you still there?"


def pairing_errors(body: dict) -> list[str]:
    """What OpenAI's chat completions endpoint says about broken tool pairing (its wording).

    Every assistant ``tool_calls`` id needs a ``tool`` message right after that assistant message
    (before any other role), and every ``tool`` message must answer a call of the assistant
    message just before its run of tool messages.
    """
    errors: list[str] = []
    waiting: list[str] = []  # call ids of the last assistant message not answered yet
    answerable: set[str] = set()
    for message in [*body.get("messages", []), {"role": "end"}]:
        role = message.get("role")
        if role == "tool":
            call_id = message.get("tool_call_id")
            if call_id not in answerable:
                errors.append(
                    "Invalid parameter: messages with role 'tool' must be a response to a preceeding "
                    f"message with 'tool_calls' ({call_id})."
                )
            answerable.discard(call_id)
            waiting = [c for c in waiting if c != call_id]
            continue
        if waiting:
            errors.append(
                "An assistant message with 'tool_calls' must be followed by tool messages responding to "
                f"each 'tool_call_id'. The following tool_call_ids did not have response messages: {', '.join(waiting)}"
            )
        waiting = [c["id"] for c in message.get("tool_calls") or []] if role == "assistant" else []
        answerable = set(waiting)
    return errors


class StrictUpstream:
    """The request handler of the local server: 400 on broken pairing, else a short answer."""

    def __init__(self) -> None:
        self.rejected: list[list[str]] = []

    def __call__(self, request: RecordedRequest) -> SSEResponse:
        errors = pairing_errors(request.json() or {})
        if errors:
            self.rejected.append(errors)
            body = {
                "error": {
                    "message": errors[0],
                    "type": "invalid_request_error",
                    "param": "messages",
                    "code": None,
                }
            }
            return SSEResponse(
                400, {"content-type": "application/json"}, [json.dumps(body).encode()], chunked=False
            )
        return SSEResponse(pieces=text_pieces(ANSWER))


def call(call_id: str) -> dict:
    return {"id": call_id, "name": "current_time", "arguments": {"timezone": "UTC"}}


# Per case: the seeded rows, then what the provider must receive after the system message.
CASES = {
    "a_tool_call_without_its_result": (
        [
            {"role": "user", "content": "What time is it?"},
            {"role": "assistant", "content": "", "tool_calls": [call("call_lost")]},
        ],
        [
            ("user", "What time is it?"),
            ("assistant", ("call_lost",)),
            ("tool", "call_lost", INTERRUPTED_RESULT),
            ("user", NEW_MESSAGE),
        ],
    ),
    "an_orphaned_tool_result": (
        [
            {"role": "user", "content": "Hello"},
            {"role": "assistant", "content": "Hi!"},
            {"role": "tool", "content": "12:00", "tool_call_id": "call_orphan", "tool_name": "current_time"},
        ],
        [("user", "Hello"), ("assistant", ()), ("user", NEW_MESSAGE)],
    ),
    "a_result_separated_from_its_call_by_a_user_row": (
        [
            {"role": "user", "content": "What time is it?"},
            {"role": "assistant", "content": "", "tool_calls": [call("call_late")]},
            {"role": "user", "content": "Hurry up."},
            {"role": "tool", "content": "12:00", "tool_call_id": "call_late", "tool_name": "current_time"},
        ],
        [
            ("user", "What time is it?"),
            ("assistant", ("call_late",)),
            ("tool", "call_late", "12:00"),  # the real result, moved up to follow its call
            ("user", "Hurry up."),
            ("user", NEW_MESSAGE),
        ],
    ),
    "an_id_reused_by_two_turns": (
        [
            {"role": "user", "content": "Time?"},
            {"role": "assistant", "content": "", "tool_calls": [call("call_0")]},
            {"role": "tool", "content": "09:00", "tool_call_id": "call_0", "tool_name": "current_time"},
            {"role": "assistant", "content": "Nine."},
            {"role": "user", "content": "And now?"},
            {"role": "assistant", "content": "", "tool_calls": [call("call_0")]},
        ],
        [
            ("user", "Time?"),
            ("assistant", ("call_0",)),
            ("tool", "call_0", "09:00"),
            ("assistant", ()),
            ("user", "And now?"),
            ("assistant", ("call_0",)),
            ("tool", "call_0", INTERRUPTED_RESULT),
            ("user", NEW_MESSAGE),
        ],
    ),
}


def shape(message: dict) -> tuple:
    """A request message, compactly: what the pairing is about."""
    if message["role"] == "tool":
        return ("tool", message["tool_call_id"], message["content"])
    if message["role"] == "assistant":
        return ("assistant", tuple(c["id"] for c in message.get("tool_calls") or []))
    return (message["role"], str(message["content"]).split(RUNTIME_CONTEXT_MARKER)[0])


@database_sync_to_async
def seed_history(session_id: str, rows: list[dict]) -> list[dict]:
    """Store ``rows`` as the dialog's committed history (seq 1…n) and return them as history rows."""
    dialog = Dialog.objects.get(pk=session_id)
    stored = [Message.objects.create(dialog=dialog, seq=seq, **row) for seq, row in enumerate(rows, start=1)]
    Dialog.objects.filter(pk=session_id).update(
        history_revision=len(rows),
        total_message_count=len(rows),
        message_count=sum(row["role"] == "user" for row in rows),
    )
    return [message_to_history_row(m) for m in stored]


@database_sync_to_async
def stored_history(session_id: str) -> list[tuple]:
    return list(
        Message.objects.filter(dialog_id=session_id)
        .order_by("seq")
        .values_list("seq", "role", "tool_call_id")
    )


@pytest.mark.parametrize("case", list(CASES))
async def test_a_damaged_tool_history_is_repaired_for_a_provider_that_rejects_unpaired_calls(
    case, connect, start_worker
):
    seeded, expected = CASES[case]
    upstream = StrictUpstream()
    async with LocalSSEServer(handler=upstream) as server:
        provider = OpenAICompatProvider(server.base_url, "test-key", "test-model", max_retries=0)
        client = await connect(await make_token())
        session_id = (await client.until("ready"))["active_session_id"]
        history_rows = await seed_history(session_id, seeded)

        # The control: the stored history as it is, unrepaired, is refused by this upstream.
        raw = [m for m in (row_to_message(r) for r in history_rows) if m is not None]
        with pytest.raises(ProviderError) as refused:
            await provider.collect(
                ProviderRequest([ProviderMessage.system("s"), *raw, ProviderMessage.user("x")])
            )
        assert refused.value.http_status == 400 and upstream.rejected
        upstream.rejected.clear()

        await start_worker(provider)
        await client.send({"type": "message", "content": NEW_MESSAGE, "client_msg_id": f"repair-{case}"})
        committed = await client.until("turn_committed")

    final = client.of_type("turn_updated")[-1]["turn"]
    assert final["status"] == "completed", final["error"]
    assert [(m["role"], m["content"]) for m in committed["messages"]] == [
        ("user", NEW_MESSAGE),
        ("assistant", ANSWER),
    ]
    assert upstream.rejected == [] and server.errors == []
    turn_request = server.recorded[-1].json()
    assert pairing_errors(turn_request) == []
    assert turn_request["messages"][0]["role"] == "system"
    assert [shape(m) for m in turn_request["messages"][1:]] == expected
    # The repair is the request's only: the stored history is what it was, plus the new turn.
    after = await stored_history(session_id)
    assert after[: len(seeded)] == [
        (i, r["role"], r.get("tool_call_id")) for i, r in enumerate(seeded, start=1)
    ]
    assert [role for _, role, _ in after[len(seeded) :]] == ["user", "assistant"]
