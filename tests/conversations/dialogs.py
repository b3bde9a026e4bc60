"""Dialogs with a realistic history, written straight to the database, for the operator tools'
tests: the admin, the management commands, export and import."""

from __future__ import annotations

import uuid
from typing import Any

from conversations.models import ChatState, Dialog, Message, Plan

PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="


def make_dialog(
    owner: Any,
    *,
    channel: str = "cli_chat",
    chat_id: str | None = None,
    dialog_id: str | None = None,
    title: str = "Weather and time",
    turns: int = 1,
    active: bool = False,
    **fields: Any,
) -> Dialog:
    """A dialog with ``turns`` turns, each: user (with an image on the first), assistant with
    reasoning, provider state and two tool calls (one with non-JSON arguments), two tool results
    (one an error), a final assistant answer. Counters are set like the storage layer sets them."""
    chat_id = chat_id if chat_id is not None else (str(owner.pk) if owner is not None else "ext-chat")
    dialog_id = dialog_id or uuid.uuid4().hex[:8]
    dialog = Dialog.objects.create(
        id=Dialog.unified_id(channel, chat_id, dialog_id),
        channel=channel,
        chat_id=chat_id,
        dialog_id=dialog_id,
        owner=owner,
        title=title,
        **{"title_is_default": False, "created_at": 1_700_000_000_000, **fields},
    )
    rows: list[Message] = []
    seq = 0

    def add(**kw: Any) -> None:
        nonlocal seq
        seq += 1
        rows.append(Message(dialog=dialog, seq=seq, created_at=1_700_000_000_000 + seq * 1000, **kw))

    for t in range(turns):
        turn = uuid.uuid4()
        add(
            role="user",
            content=f"What time is it in Paris? ({t})",
            turn_id=turn,
            media_refs=[{"mime_type": "image/png", "data": PNG}] if t == 0 else [],
            source={"kind": "user", "from_channel": channel, "from_user_id": chat_id, "reply_to": None},
        )
        add(
            role="assistant",
            content="Let me check.",
            reasoning_content="The user wants the time; call tools.",
            turn_id=turn,
            iteration=0,
            provider_state={
                "provider": "openai",
                "endpoint": "api.example/v1",
                "blocks": [{"type": "text", "chars": 13}],
            },
            tool_calls=[
                {"id": f"call_{t}_a", "name": "current_time", "arguments": {"tz": "Europe/Paris"}},
                {"id": f"call_{t}_b", "name": "http_fetch", "arguments": {}, "raw_arguments": "{url: nope"},
            ],
        )
        add(
            role="tool",
            content="2024-05-01T12:00:00+02:00",
            tool_call_id=f"call_{t}_a",
            tool_name="current_time",
            turn_id=turn,
            iteration=0,
        )
        add(
            role="tool",
            content="arguments are not valid JSON",
            tool_call_id=f"call_{t}_b",
            tool_name="http_fetch",
            is_error=True,
            turn_id=turn,
            iteration=0,
        )
        add(
            role="assistant",
            content="It is noon in Paris. ```code``` and <b>html</b>",
            reasoning_content="Answer briefly.",
            turn_id=turn,
            iteration=1,
            completion_status="cancelled" if t == turns - 1 and turns > 1 else "completed",
        )
    Message.objects.bulk_create(rows)
    Dialog.objects.filter(pk=dialog.pk).update(
        message_count=turns,
        total_message_count=len(rows),
        history_revision=len(rows),
        last_active_at=fields.get("last_active_at", 1_700_000_000_000 + seq * 1000),
        state_version=3 * turns,
    )
    Plan.objects.create(
        dialog=dialog,
        content={"steps": [{"text": "check time", "status": "done"}], "note": ""},
        updated_at=1_700_000_001_000,
    )
    if active:
        ChatState.objects.update_or_create(
            channel=channel, chat_id=chat_id, defaults={"owner": owner, "active_dialog": dialog}
        )
    dialog.refresh_from_db()
    return dialog
